"""A local Kafka cluster: N KRaft nodes (broker and controller each) on loopback, N controller voters.

Node ``i`` (1..N) lives in ``<data_dir>/node-<i>`` (a directory like a single broker's, so
:func:`eaglefeed.devtools.localbroker.status` reads it) and listens on ``port + 2(i-1)`` for clients and
the port after it for the controller quorum. Topics default to replication factor
``min(N, 3)`` and ``min.insync.replicas`` one less (at least 1), the internal topics too: with
the clients' ``acks=all`` a record acknowledged by a 3-node cluster is on at least 2 nodes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from eaglefeed.core.errors import BrokerError
from eaglefeed.devtools.localbroker import (
    _PLAINTEXT_LISTENERS,
    _SERVER_PROPERTIES,
    BrokerStatus,
    _java,
    _random_cluster_id,
    _wait_started,
    resolve_jars,
    status,
)
from eaglefeed.devtools.startup import process_alive as _alive

NODES_FILE = "nodes"


@dataclass(frozen=True)
class ClusterStatus:
    """Every node's status; ``running`` when all of them run."""

    nodes: dict[int, BrokerStatus]
    bootstrap_servers: str

    @property
    def running(self) -> bool:
        """Whether every node runs."""
        return all(node.running for node in self.nodes.values())


def is_cluster(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a cluster started by :func:`start_cluster`."""
    return (data_dir / NODES_FILE).exists()


def replication(nodes: int) -> tuple[int, int]:
    """Replication factor and ``min.insync.replicas`` for a cluster of ``nodes``."""
    replicas = min(nodes, 3)
    return replicas, max(1, replicas - 1)


def start_cluster(*, data_dir: Path, port: int, cache_dir: Path, nodes: int = 3, host: str = "127.0.0.1",
                  timeout: float = 120.0) -> ClusterStatus:
    """Start every node of the cluster that is not running (all at once: the quorum needs a majority).

    Args:
        data_dir: the cluster's directory (one sub-directory per node).
        port: node 1's client port; node ``i`` uses ``port + 2(i-1)`` and the port after it.
        cache_dir: jar cache (see :func:`eaglefeed.devtools.localbroker.resolve_jars`).
        nodes: how many nodes (and controller voters).
        host: the loopback address to listen on.
        timeout: seconds to wait until every node answers.
    """
    if nodes < 1:
        raise BrokerError("a cluster needs at least one node")
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / NODES_FILE).write_text(f"{nodes} {host} {port}\n")
    cluster_file = data_dir / "cluster.id"
    if not cluster_file.exists():
        cluster_file.write_text(_random_cluster_id())
    launched = [_launch(data_dir, i, cache_dir) for i in range(1, nodes + 1)
                if not _node_status(data_dir, i).running]
    for proc, node_dir, offset, node_port in launched:
        _wait_started(proc, node_dir / "logs" / "server.log", offset, host, node_port, timeout)
    return cluster_status(data_dir)


def start_node(data_dir: Path, node_id: int, cache_dir: Path, timeout: float = 120.0) -> BrokerStatus:
    """Start node ``node_id`` of a cluster again (after it was stopped or killed)."""
    data_dir = data_dir.resolve()
    current = _node_status(data_dir, node_id)
    if current.running:
        return current
    proc, node_dir, offset, node_port = _launch(data_dir, node_id, cache_dir)
    _, host, _ = _layout(data_dir)
    _wait_started(proc, node_dir / "logs" / "server.log", offset, host, node_port, timeout)
    return status(node_dir)


def stop_cluster(data_dir: Path, timeout: float = 60.0) -> int:
    """Stop every running node at once (SIGTERM, SIGKILL after ``timeout``); returns how many were running.

    All at once: stopped one after another, the last node loses its controller quorum and its
    controlled shutdown waits for a controller that has gone, until the SIGKILL a minute later
    (about 6 s for three nodes at once, 66 s one by one).
    """
    count, _, _ = _layout(data_dir)
    running = {i: node.pid for i in range(1, count + 1)
               if (node := _node_status(data_dir, i)).running and node.pid is not None}
    for pid in running.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in running.values()):
        if time.monotonic() > deadline:
            for pid in running.values():
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for i in running:
        (node_dir(data_dir, i) / "broker.pid").unlink(missing_ok=True)
    return len(running)


def cluster_status(data_dir: Path) -> ClusterStatus:
    """Every node's status."""
    count, host, port = _layout(data_dir)
    servers = ",".join(f"{host}:{port + 2 * (i - 1)}" for i in range(1, count + 1))
    return ClusterStatus(nodes={i: _node_status(data_dir, i) for i in range(1, count + 1)},
                         bootstrap_servers=servers)


def node_dir(data_dir: Path, node_id: int) -> Path:
    """The directory of node ``node_id``."""
    return data_dir / f"node-{node_id}"


def _node_status(data_dir: Path, node_id: int) -> BrokerStatus:
    return status(node_dir(data_dir, node_id))


def _layout(data_dir: Path) -> tuple[int, str, int]:
    try:
        count, host, port = (data_dir / NODES_FILE).read_text().split()
    except (OSError, ValueError) as exc:
        raise BrokerError(f"no cluster in {data_dir} ({exc})") from exc
    return int(count), host, int(port)


def _launch(data_dir: Path, node_id: int, cache_dir: Path) -> tuple[subprocess.Popen[bytes], Path, int, int]:
    """Write node ``node_id``'s settings, format its storage once, start it; returns what to wait on."""
    count, host, port = _layout(data_dir)
    lib = resolve_jars(cache_dir)
    home = node_dir(data_dir, node_id)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    node_port = port + 2 * (node_id - 1)
    voters = ",".join(f"{i}@{host}:{port + 2 * (i - 1) + 1}" for i in range(1, count + 1))
    replicas, min_isr = replication(count)
    ports = {"host": host, "port": node_port, "controller_port": node_port + 1}
    props = home / "server.properties"
    props.write_text(_SERVER_PROPERTIES.format(
        listeners=_PLAINTEXT_LISTENERS.format(**ports), log_dir=home / "kraft", node_id=node_id,
        replicas=replicas, min_isr=min_isr, quorum=f"controller.quorum.voters={voters}", **ports))
    log_config = home / "log4j2.properties"
    log_config.write_bytes(resources.files(__package__).joinpath("log4j2.properties").read_bytes())
    java = _java(lib, logs, log_config)
    fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format", "--ignore-formatted",
                          "-t", (data_dir / "cluster.id").read_text().strip(), "-c", str(props)],
                         capture_output=True, text=True, check=False)
    if fmt.returncode != 0:
        raise BrokerError(f"formatting node {node_id} failed:\n{fmt.stdout[-2000:]}{fmt.stderr[-2000:]}")
    server_log = logs / "server.log"
    offset = server_log.stat().st_size if server_log.exists() else 0
    with open(logs / "stdout.log", "ab") as out:
        proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    (home / "broker.pid").write_text(str(proc.pid))
    (home / "bootstrap").write_text(f"{host}:{node_port}")
    return proc, home, offset, node_port
