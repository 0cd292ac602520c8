"""A three-node cluster for the cluster scenarios: its nodes can be SIGKILLed, stopped and started one by one.

It stands in for :class:`reliability.broker.Broker` in a :class:`reliability.pipeline.Pipeline`
(same ``bootstrap``, ``start`` and ``stop``), and answers the questions a scenario asks before it
strikes: which node leads the most partitions, which node is the active KRaft controller (the
leader of the metadata quorum), which node coordinates a consumer group.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient

from eaglefeed.core.kafka import retrying
from eaglefeed.devtools.localbroker import cluster, stop
from eaglefeed.devtools.startup import bindable, free_port
from reliability.broker import Broker

OFFSETS_TOPIC = "__consumer_offsets"


class Cluster(Broker):
    """``nodes`` KRaft nodes (broker and controller voter each) on consecutive loopback ports.

    Args:
        data_dir: the cluster's directory (one sub-directory per node).
        cache_dir: the Kafka jar cache.
        nodes: how many nodes.
    """

    def __init__(self, *, data_dir: Path, cache_dir: Path, nodes: int = 3) -> None:
        super().__init__(data_dir=data_dir, cache_dir=cache_dir)
        self.nodes = nodes
        self.port = _free_ports(2 * nodes)

    @property
    def bootstrap(self) -> str:
        """Every node's client address: a client can start while any one node is down."""
        return ",".join(f"127.0.0.1:{self.port + 2 * i}" for i in range(self.nodes))

    @property
    def pid(self) -> int | None:
        """No single pid: the nodes' memory is not sampled (see :meth:`node_pids`)."""
        return None

    def start(self) -> Cluster:
        """Start every node that is not running and wait until all serve; returns self."""
        cluster.start_cluster(data_dir=self.data_dir, port=self.port, cache_dir=self.cache_dir,
                              nodes=self.nodes)
        return self

    def stop(self) -> None:
        """Stop every running node (SIGTERM)."""
        if cluster.is_cluster(self.data_dir):
            cluster.stop_cluster(self.data_dir)

    # --- one node at a time -------------------------------------------------------------
    def node_pids(self) -> dict[int, int | None]:
        """Node id → pid while it runs."""
        return {i: node.pid for i, node in cluster.cluster_status(self.data_dir).nodes.items()}

    def kill_node(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` and wait until it is gone."""
        pid = self.node_pids()[node_id]
        if pid is None:
            raise RuntimeError(f"node {node_id} is not running")
        os.kill(pid, signal.SIGKILL)
        while cluster.cluster_status(self.data_dir).nodes[node_id].running:
            time.sleep(0.05)

    def stop_node(self, node_id: int) -> None:
        """Stop node ``node_id`` cleanly (SIGTERM: controlled shutdown, leadership moved first)."""
        stop(cluster.node_dir(self.data_dir, node_id))

    def start_node(self, node_id: int) -> None:
        """Start node ``node_id`` again on its storage and wait until it serves."""
        cluster.start_node(self.data_dir, node_id, self.cache_dir)

    # --- questions ------------------------------------------------------------------------
    def leaders(self, topics: list[str] | None = None) -> Counter[int]:
        """Node id → how many partitions it leads (of ``topics``, default every topic)."""
        described = self._ask(lambda admin: admin.describe_topics(topics))
        return Counter(part["leader_id"] for topic in described for part in topic["partitions"]
                       if part["leader_id"] >= 0)

    def under_replicated(self, topics: list[str] | None = None) -> int:
        """Partitions (of ``topics``, default all) with fewer in-sync replicas than replicas."""
        described = self._ask(lambda admin: admin.describe_topics(topics))
        return sum(len(part["isr_nodes"]) < len(part["replica_nodes"])
                   for topic in described for part in topic["partitions"])

    def controller(self) -> int:
        """The active KRaft controller: the leader of the metadata quorum (DescribeQuorum)."""
        quorum = self._ask(lambda admin: admin.describe_metadata_quorum())
        leader = int(quorum["topics"][0]["partitions"][0]["leader_id"])
        if leader < 0:
            raise RuntimeError("the metadata quorum has no leader now")
        return leader

    def coordinator(self, group: str) -> int:
        """The node that coordinates ``group``: the leader of its ``__consumer_offsets`` partition."""
        (offsets,) = self._ask(lambda admin: admin.describe_topics([OFFSETS_TOPIC]))
        partitions = {p["partition_index"]: p["leader_id"] for p in offsets["partitions"]}
        if not partitions:
            raise RuntimeError(f"{OFFSETS_TOPIC} does not exist yet: no group committed")
        return int(partitions[_java_abs(_java_hash(group)) % len(partitions)])

    def _ask(self, question: Callable[[KafkaAdminClient], Any], timeout: float = 60.0) -> Any:
        """``question(admin)`` on a fresh admin client, asked again while it meets a node that is down."""
        deadline = time.monotonic() + timeout
        admin = retrying(lambda: KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15000,
                                                  client_id="reliability-cluster"), deadline, "connecting")
        try:
            return retrying(lambda: question(admin), deadline, "asking the cluster")
        finally:
            admin.close()


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit overflow), which Kafka partitions groups by."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _java_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: 0 for the smallest int, the absolute value otherwise."""
    return 0 if value == -(1 << 31) else abs(value)


def _free_ports(count: int, host: str = "127.0.0.1") -> int:
    """A port such that it and the ``count - 1`` after it are free now."""
    for _ in range(200):
        port = free_port(host)
        if all(bindable(host, port + i) for i in range(count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports on {host}")
