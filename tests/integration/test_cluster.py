"""A three-node local cluster (``eaglefeed broker start --nodes 3``): records acknowledged with
``acks=all`` survive a SIGKILL of the leader of their partition."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.devtools.localbroker import cluster
from tests.conftest import cache_dir, free_port

pytestmark = pytest.mark.kafka

TOPIC = "cluster.records"


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "cluster"
    port = free_port()
    cluster.start_cluster(data_dir=data_dir, port=port, cache_dir=cache_dir(), nodes=3)
    yield data_dir
    cluster.stop_cluster(data_dir)


def produce(kafka: KafkaConfig, values: range) -> None:
    producer = make_producer(kafka)  # acks=all, idempotent
    try:
        futures = [producer.send(TOPIC, key=str(i).encode(), value=str(i).encode()) for i in values]
        for future in futures:
            future.get(timeout=120)
    finally:
        producer.close()


def leader_of(kafka: KafkaConfig, partition: int) -> tuple[int, list[int]]:
    """The partition's leader and in-sync replicas, once the node asked knows the topic's partitions.

    A node may answer for a topic just created before its metadata lists the partitions (seen on a
    loaded machine): ask again rather than read an empty list.
    """
    deadline = time.monotonic() + 30
    while True:
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
        try:
            (topic,) = admin.describe_topics([TOPIC])
        finally:
            admin.close()
        parts = [p for p in topic["partitions"] if p["partition_index"] == partition]
        if parts or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert parts, f"{TOPIC} has no partition {partition} after 30 s"
    return parts[0]["leader_id"], parts[0]["isr_nodes"]


def test_records_acknowledged_by_all_survive_a_sigkill_of_their_leader(three_nodes):
    status = cluster.cluster_status(three_nodes)
    assert status.running and len(status.nodes) == 3
    kafka = KafkaConfig(bootstrap_servers=status.bootstrap_servers, topic_prefix="cluster")
    ensure_topics(kafka, {TOPIC: 3})
    leader, isr = leader_of(kafka, 0)
    assert len(isr) == 3  # replication factor 3 by default
    produce(kafka, range(300))
    os.kill(status.nodes[leader].pid, signal.SIGKILL)
    produce(kafka, range(300, 600))  # a new leader takes over; min.insync.replicas=2 still holds
    new_leader, _ = leader_of(kafka, 0)
    assert new_leader != leader
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=kafka.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)
    try:
        values = [int(r.value) for r in consumer]
    finally:
        consumer.close()
    assert sorted(values) == list(range(600))  # nothing lost, nothing doubled
    restarted = cluster.start_node(three_nodes, leader, cache_dir())
    assert restarted.running and cluster.cluster_status(three_nodes).running
