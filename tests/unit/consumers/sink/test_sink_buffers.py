"""The sink's buffer policy: when a partition's messages become a segment."""

from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.metrics import SinkMetrics
from tests.unit.consumers.sink.sink_support import records

TP = TopicPartition("x.generations", 0)
VALUE = b"v" * 36  # 100 bytes a message, with the 64 of overhead


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_buffers(*tps, flush_rows=100, flush_bytes=10**9, flush_seconds=60, max_buffer_bytes=10**9):
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="x"), output="unused", flush_rows=flush_rows,
                     flush_bytes=flush_bytes, flush_seconds=flush_seconds, max_buffer_bytes=max_buffer_bytes)
    registry, clock = CollectorRegistry(), Clock()
    buffers = Buffers(cfg=cfg, metrics=SinkMetrics.create(registry), clock=clock)
    for tp in tps or (TP,):
        buffers.open(tp)
    return buffers, registry, clock


def gauges(registry):
    return (registry.get_sample_value("eaglefeed_sink_buffered_records"),
            registry.get_sample_value("eaglefeed_sink_commit_lag_seconds"))


def sizes(due):
    return [(tp.partition, [m.offset for m in messages]) for tp, messages in due]


def test_full_buffers_become_segments_of_exactly_flush_rows():
    buffers, _, clock = make_buffers(flush_rows=3)
    buffers.add(TP, records(TP, [VALUE] * 7))  # one poll of 7 records
    assert sizes(buffers.take_due(clock.now)) == [(0, [0, 1, 2]), (0, [3, 4, 5])]
    assert buffers.buffered(TP) == 1
    assert sizes(buffers.take_due(clock.now, force=True)) == [(0, [6])]


def test_a_buffer_rolls_when_its_oldest_message_is_old_enough_or_it_is_big_enough():
    buffers, registry, clock = make_buffers(flush_seconds=60, flush_bytes=300)
    buffers.add(TP, records(TP, [VALUE] * 2))
    clock.now += 59
    assert buffers.take_due(clock.now) == []
    assert gauges(registry) == (2, 59)
    buffers.add(TP, records(TP, [VALUE], start=2))  # a later message does not reset the age
    assert sizes(buffers.take_due(clock.now + 1)) == [(0, [0, 1, 2])]
    assert gauges(registry) == (0, 0)
    buffers.add(TP, records(TP, [VALUE] * 2, start=3))
    assert buffers.take_due(clock.now) == []  # 200 bytes
    buffers.add(TP, records(TP, [VALUE], start=5))
    assert sizes(buffers.take_due(clock.now)) == [(0, [3, 4, 5])]  # 300 bytes


def test_beyond_the_total_budget_the_largest_buffer_goes_first():
    big, small = TopicPartition(TP.topic, 1), TopicPartition(TP.topic, 2)
    buffers, _, clock = make_buffers(big, small, max_buffer_bytes=500)
    buffers.add(big, records(big, [VALUE] * 4))
    buffers.add(small, records(small, [VALUE] * 2))
    assert sizes(buffers.take_due(clock.now)) == [(1, [0, 1, 2, 3])]
    assert buffers.buffered(small) == 2


def test_records_of_a_partition_not_ours_are_ignored_and_close_returns_what_was_held():
    buffers, _, clock = make_buffers()
    other = TopicPartition(TP.topic, 9)
    buffers.add(other, records(other, [VALUE]))
    buffers.add(TP, records(TP, [VALUE] * 2))
    assert [m.offset for m in buffers.close(TP)] == [0, 1]
    assert buffers.close(TP) == [] and buffers.close(other) == []
    assert buffers.take_due(clock.now, force=True) == []
