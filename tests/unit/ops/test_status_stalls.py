"""``status`` flags a partition with records left whose committed offset has stayed put."""

from __future__ import annotations

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.lag import PartitionLag
from eaglefeed.ops import pipeline_status
from eaglefeed.ops.pipeline_status import render, take_snapshot

KAFKA = KafkaConfig(topic_prefix="x")
GROUPS = {"generate": "x-generate", "sink": "x-sink"}


class Probe:
    """Committed offsets and ends per topic, as the test sets them."""

    def __init__(self) -> None:
        self.parts = {KAFKA.prompts_topic: [(0, 10, 10), (1, 52, 3314)], KAFKA.generations_topic: [(0, 5, 6)]}

    def measure(self, group, topic):
        return [PartitionLag(topic=topic, partition=p, committed=c, end=e) for p, c, e in self.parts[topic]]

    def end_offsets(self, topic):
        return {p: e for p, _c, e in self.parts.get(topic, [])}


def snap(probe, previous, monkeypatch, at):
    monkeypatch.setattr(pipeline_status.time, "monotonic", lambda: at)
    return take_snapshot(probe, KAFKA, groups=GROUPS, dataset=None, previous=previous, stall_seconds=60)


def test_a_partition_whose_committed_offset_stays_put_with_records_left_is_flagged(monkeypatch):
    probe = Probe()
    first = snap(probe, None, monkeypatch, 1000.0)
    assert all(not s.stalled for s in first.stages)
    later = snap(probe, first, monkeypatch, 1059.0)
    assert all(not s.stalled for s in later.stages)  # not for 60 s yet
    stuck = snap(probe, later, monkeypatch, 1130.0)
    generate = next(s for s in stuck.stages if s.name == "generate")
    assert [(p.partition, p.committed, p.end) for p in generate.stalled] == [(1, 52, 3314)]
    sink = next(s for s in stuck.stages if s.name == "sink")
    assert sink.stalled == ()  # one past its last record, before a transaction marker: done
    assert "STALLED  generate: x.prompts-1 at 52 of 3314, no progress for 2m10s" in render(stuck, KAFKA)
    probe.parts[KAFKA.prompts_topic][1] = (1, 60, 3314)  # it moved: the count starts again
    moving = snap(probe, stuck, monkeypatch, 1200.0)
    assert all(not s.stalled for s in moving.stages) and "STALLED" not in render(moving, KAFKA)
