"""Two pipelines with different topic prefixes on one broker keep to their own consumer groups:
members joining and leaving one never rebalance the other."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.clients import KafkaClients
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.kafka import ensure_topics
from eaglefeed.core.lifecycle import StopSignal

pytestmark = pytest.mark.kafka


class Counting(ConsumerRebalanceListener):
    """Passes every rebalance callback on to the stage's listener, and notes it."""

    def __init__(self, listener: Any, calls: list[tuple[str, int]]) -> None:
        self.listener, self.calls = listener, calls

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", len(revoked)))
        self.listener.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", len(assigned)))
        self.listener.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: Any) -> None:
        self.calls.append(("lost", len(lost)))
        self.listener.on_partitions_lost(lost)


class Watched(KafkaClients):
    """The real clients; the stage's rebalance callbacks are noted in ``calls``."""

    def __init__(self, *, kafka: KafkaConfig) -> None:
        super().__init__(kafka=kafka)
        self.calls: list[tuple[str, int]] = []

    def subscribe(self, consumer: Any, topics: list[str], listener: Any) -> None:
        super().subscribe(consumer, topics, Counting(listener, self.calls))


class Sink:
    """``run_sink`` on a thread, with the default group of its prefix."""

    def __init__(self, kafka: KafkaConfig, out: Path) -> None:
        self.clients = Watched(kafka=kafka)
        self.stop = StopSignal()
        self.thread = threading.Thread(target=run_sink, args=(SinkConfig(kafka=kafka, output=out),),
                                       kwargs={"stop": self.stop, "clients": self.clients}, daemon=True)
        self.thread.start()

    def wait_assigned(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(kind == "assigned" and n for kind, n in self.clients.calls):
            assert time.monotonic() < deadline, f"no assignment: {self.clients.calls}"
            time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def test_two_prefixes_on_one_broker_never_rebalance_each_other(kafka_config, tmp_path):
    blue = dataclasses.replace(kafka_config, topic_prefix=kafka_config.topic_prefix + "-blue")
    green = dataclasses.replace(kafka_config, topic_prefix=kafka_config.topic_prefix + "-green")
    for kafka in (blue, green):
        ensure_topics(kafka, {kafka.generations_topic: 3, kafka.dead_letter_topic: 1})
    first = Sink(blue, tmp_path / "blue")
    first.wait_assigned()
    time.sleep(1)
    settled = list(first.clients.calls)  # kafka-python (eager) revokes nothing before its first join
    assert [c for c in settled if c[1]] == [("assigned", 3)]
    others = []
    try:
        for i in range(2):  # two members join the other pipeline's group, one of them leaves again
            others.append(Sink(green, tmp_path / f"green-{i}"))
            others[-1].wait_assigned()
        others.pop(0).close()
        time.sleep(3)  # a rebalance of the shared group would have reached the blue sink by now
        assert first.clients.calls == settled, "the other pipeline rebalanced this one"
        admin = KafkaAdminClient(bootstrap_servers=kafka_config.bootstrap_servers)
        try:
            groups = admin.describe_groups([blue.default_group("sink"), green.default_group("sink")])
        finally:
            admin.close()
        assert [len(g["members"]) for g in groups.values()] == [1, 1]
    finally:
        for sink in [first, *others]:
            sink.close()
