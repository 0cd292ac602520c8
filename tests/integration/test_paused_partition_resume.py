"""Issue 26 on the real broker: a partition paused in the middle of a fetched batch, while another
partition keeps being read, is fetched again once resumed (kafka-python 3.0.12 never fetched it
again: its parked batch never went back in line; see ``eaglefeed.core.resume``)."""

from __future__ import annotations

import time

import pytest
from kafka.structs import TopicPartition

from eaglefeed.core.clients import KafkaClients
from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.core.resume import resume

pytestmark = pytest.mark.kafka

PER_PARTITION = 300


def publish(kafka, topic: str) -> None:
    producer = make_producer(kafka)
    try:
        for partition in (0, 1):
            for i in range(PER_PARTITION):
                producer.send(topic, key=f"k{i}".encode(), value=b"x" * 20, partition=partition)
        producer.flush()
    finally:
        producer.close()


def park(consumer, tps: list[TopicPartition], deadline: float) -> TopicPartition:
    """Read 5 records of one partition, pause it mid-batch, read the other to its end; return the first."""
    first: dict[TopicPartition, list] = {}
    while not first:  # a few records of one partition: the rest of its batch waits in line
        assert time.monotonic() < deadline, "no record within 30 s"
        first = {tp: recs for tp, recs in consumer.poll(timeout_ms=500, max_records=5).items() if recs}
    (paused, got), = first.items()
    other = next(tp for tp in tps if tp != paused)
    assert len(got) == 5 and got[-1].offset == 4
    consumer.pause(paused)  # as the worker does with a partition it holds (settle) or has no room for
    read_other = 0
    while read_other < PER_PARTITION:  # the other partition is read meanwhile, to its end
        assert time.monotonic() < deadline, f"the unpaused partition returned {read_other} records"
        batch = consumer.poll(timeout_ms=500, max_records=500)
        assert paused not in batch
        read_other += len(batch.get(other, []))
    return paused


def read_rest(consumer, tp: TopicPartition) -> list[int]:
    """Poll as the worker's turns do (each one resumes what it may: ``core.resume``); ``tp``'s offsets."""
    offsets: list[int] = []
    until = time.monotonic() + 15
    while len(offsets) < PER_PARTITION - 5 and time.monotonic() < until:
        resume(consumer, set())
        offsets += [rec.offset for rec in consumer.poll(timeout_ms=500, max_records=500).get(tp, [])]
    return offsets


@pytest.mark.parametrize("then", ["resumed", "reassigned"])
def test_a_partition_paused_mid_batch_is_read_to_its_end_after_resume(kafka_config, then):
    """``resumed``: the worker resumes it. ``reassigned``: it leaves this member's assignment while
    paused and comes back (a fresh, unpaused state: kafka-python's parked batch outlives it)."""
    kafka = kafka_config
    topic = kafka.prompts_topic
    ensure_topics(kafka, {topic: 2})
    publish(kafka, topic)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = KafkaClients(kafka=kafka).reader(auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign(tps)
        paused = park(consumer, tps, time.monotonic() + 30)
        if then == "resumed":
            resume(consumer, {paused})
        else:
            consumer.assign([tp for tp in tps if tp != paused])
            consumer.poll(timeout_ms=200)
            consumer.assign(tps)
            consumer.seek(paused, 5)  # (a group member would start at the committed offset)
        offsets = read_rest(consumer, paused)
        assert offsets == list(range(5, PER_PARTITION)), (
            f"after it was {then}, {paused} returned {len(offsets)} of its {PER_PARTITION - 5} remaining "
            f"records (position {consumer.position(paused)})")
    finally:
        consumer.close()
