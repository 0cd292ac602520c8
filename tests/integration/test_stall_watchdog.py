"""The stall watchdog on the real broker: a partition whose fetch state never becomes fetchable again
(kafka-python #3131's shape, set on the sink's own consumer) is recovered, and every record lands."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.clients import KafkaClients
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.schemas import GENERATION
from tests.integration.test_sink_exactly_once import record
from tests.integration.test_sink_idle_exit import written_ids
from tests.running import wait_until

pytestmark = pytest.mark.kafka


class Capturing(KafkaClients):
    """The real clients; keeps the sink's consumer so the test can break its fetch state."""

    consumer_made = None

    def consumer(self, group_id, **overrides):
        self.consumer_made = super().consumer(group_id, **overrides)
        return self.consumer_made


def publish(kafka, ids: range, partition: int) -> None:
    rng = random.Random(ids.start)
    producer = make_producer(kafka)
    try:
        for i in ids:
            rec = record(i, rng)
            producer.send(kafka.generations_topic, key=rec["id"].encode(), value=GENERATION.encode(rec),
                          partition=partition)
        producer.flush()
    finally:
        producer.close()


def test_a_partition_that_stops_fetching_is_recovered_and_every_record_lands(kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: 2, kafka.dead_letter_topic: 1})
    out: Path = tmp_path / "dataset"
    clients, registry, stop = Capturing(kafka=kafka), CollectorRegistry(), StopSignal()
    cfg = SinkConfig(kafka=kafka, output=out, flush_seconds=0.3, stall_seconds=5)
    sink = threading.Thread(target=run_sink, args=(cfg,), kwargs={"stop": stop, "registry": registry,
                                                                   "clients": clients})
    sink.start()
    try:
        publish(kafka, range(50), partition=0)
        publish(kafka, range(50, 100), partition=1)
        wait_until(lambda: len(written_ids(out)) == 100, timeout=60, what="the first 100 rows")
        consumer = clients.consumer_made
        stuck = next(tp for tp in consumer.assignment() if tp.partition == 1)
        # What kafka-python #3131 left behind: a retained partition still marked pending revocation,
        # never fetchable again. A seek does not clear it; joining the group again does.
        consumer._subscription.assignment[stuck].mark_pending_revocation()
        publish(kafka, range(100, 150), partition=0)
        publish(kafka, range(150, 200), partition=1)
        wait_until(lambda: len(written_ids(out)) == 200, timeout=60,
                   what=f"{len(written_ids(out))} of 200 rows: partition 1 never recovered")
    finally:
        stop.set()
        sink.join(timeout=60)
    ids = written_ids(out)
    assert len(ids) == len(set(ids)) == 200
    steps = {a: registry.get_sample_value("eaglefeed_sink_stall_recoveries_total", {"action": a}) or 0
             for a in ("seek", "rejoin", "exit")}
    assert steps["seek"] >= 1 and steps["rejoin"] >= 1 and steps["exit"] == 0, steps  # the re-join cured it
