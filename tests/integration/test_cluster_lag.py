"""A node of a cluster stops: lag readings (`eaglefeed status`, gauges) follow; the rest stops at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.core.lag import LagProbe
from eaglefeed.devtools.localbroker import cluster
from reliability.cluster import Cluster
from tests.conftest import cache_dir

pytestmark = pytest.mark.kafka


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Cluster]:
    own = Cluster(data_dir=tmp_path / "cluster", cache_dir=cache_dir()).start()
    yield own
    own.stop()


def test_a_node_stops_lag_readings_follow_its_groups_and_the_rest_stops_at_once(nodes):
    kafka = KafkaConfig(bootstrap_servers=nodes.bootstrap, topic_prefix="lag")
    topic, group = kafka.prompts_topic, "lag-generate"
    ensure_topics(kafka, {topic: 2})
    producer = make_producer(kafka)
    for i in range(20):
        producer.send(topic, key=str(i).encode(), value=b"x", partition=i % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=nodes.bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "", -1)})
    consumer.close()
    probe = LagProbe(kafka=kafka)
    try:
        assert [p.lag for p in probe.measure(group, topic)] == [6, 10]
        nodes.stop_node(nodes.coordinator(group))
        # kafka-python's admin client kept asking the stopped node (10+ s): the probe died of
        # KafkaConnectionError after its 5 s of retries.
        assert [p.lag for p in probe.measure(group, topic)] == [6, 10]
    finally:
        probe.close()
    started = time.monotonic()
    assert cluster.stop_cluster(nodes.data_dir) == 2
    # One by one, the last node waited a minute for the quorum it had lost, until its SIGKILL.
    assert time.monotonic() - started < 30
