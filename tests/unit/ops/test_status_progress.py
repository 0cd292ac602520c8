"""``status``'s stage rows: done counts work finished out of order and a sink's buffered rows, in
flight is the workers' own count, and the rate is measured over a window of refreshes."""

from __future__ import annotations

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.lag import PartitionLag
from eaglefeed.ops import pipeline_status
from eaglefeed.ops.pipeline_status import render, take_snapshot
from eaglefeed.ops.sink_status import SinksView
from eaglefeed.ops.worker_status import WorkersView
from eaglefeed.schemas import SINK_STATUS, WORKER_STATUS
from eaglefeed.schemas.done_offsets import encode_done
from eaglefeed.schemas.sink_status import sink_status
from eaglefeed.schemas.worker_status import worker_status

KAFKA = KafkaConfig(topic_prefix="x")
GROUPS = {"generate": "x-generate", "sink": "x-sink"}
NOW_MS = 1_800_000_000_000


class Probe:
    """Partitions per topic as (partition, committed, end, metadata)."""

    def __init__(self, prompts, generations=((0, 0, 0, ""),)):
        self.parts = {KAFKA.prompts_topic: list(prompts), KAFKA.generations_topic: list(generations)}

    def measure(self, group, topic):
        return [PartitionLag(topic=topic, partition=p, committed=c, end=e, metadata=m)
                for p, c, e, m in self.parts[topic]]

    def end_offsets(self, topic):
        return {p: e for p, _c, e, _m in self.parts.get(topic, [])}


class Feed:
    def __init__(self, view):
        self.view = view

    def read(self):
        return self.view


def workers(in_flight, *, age=1.0):
    _, value = worker_status(worker_id="w", group_id="g", updated_at=int(NOW_MS - age * 1000),
                             interval_seconds=5.0, concurrency=None, prompts_done=0, servers=[],
                             prompts_in_flight=in_flight)
    return Feed(WorkersView(topic="x.workers", exists=True, reports={"w": WORKER_STATUS.decode(value)},
                            read_at=NOW_MS))


def sinks(buffered, *, age=1.0):
    _, value = sink_status(sink_id="s", group_id="x-sink", updated_at=int(NOW_MS - age * 1000),
                           interval_seconds=5.0, buffered=buffered, flush_seconds=30.0, rows_written=0)
    return Feed(SinksView(topic="x.sinks", reports={"s": SINK_STATUS.decode(value)}, read_at=NOW_MS))


def snap(probe, previous, monkeypatch, at, **feeds):
    monkeypatch.setattr(pipeline_status.time, "monotonic", lambda: at)
    return take_snapshot(probe, KAFKA, groups=GROUPS, dataset=None, previous=previous, **feeds)


def stage(snapshot, name):
    return next(s for s in snapshot.stages if s.name == name)


def test_done_offsets_above_the_committed_prefix_count_and_out_of_order_work_is_not_a_stall(monkeypatch):
    probe = Probe([(0, 166, 360, encode_done(166, range(168, 348)))])
    first = snap(probe, None, monkeypatch, 1000.0, workers=workers(12))
    generate = stage(first, "generate")
    assert (generate.done, generate.in_flight, generate.waiting, generate.total) == (346, 12, 2, 360)
    assert "generate: 180 of them finished out of order, above the committed offsets" in render(first, KAFKA)
    probe.parts[KAFKA.prompts_topic] = [(0, 166, 360, encode_done(166, range(168, 358)))]  # 166 still slow
    later = snap(probe, first, monkeypatch, 1100.0, workers=workers(2), stall_seconds=60)
    generate = stage(later, "generate")
    assert generate.rate == 0.1 and generate.eta_seconds is not None and not generate.stalled


def test_in_flight_is_unknown_without_a_fresh_report_and_never_exceeds_what_is_left(monkeypatch):
    probe = Probe([(0, 8, 10, "")])
    unknown = snap(probe, None, monkeypatch, 1.0)
    assert stage(unknown, "generate").in_flight is None
    generate_row = next(line for line in render(unknown, KAFKA).splitlines() if line.startswith("generate"))
    assert generate_row.split()[2:5] == ["8", "-", "2"]
    stale = workers(5, age=60.0)  # older than three of its intervals: the worker is gone
    assert stage(snap(probe, None, monkeypatch, 1.0, workers=stale), "generate").in_flight is None
    assert stage(snap(probe, None, monkeypatch, 1.0, workers=workers(5)), "generate").in_flight == 2


def test_a_sinks_buffered_rows_count_as_done_while_fresh(monkeypatch):
    probe = Probe([(0, 10, 10, "")], generations=[(0, 0, 12, "")])
    first = snap(probe, None, monkeypatch, 1000.0, sinks=sinks(0))
    later = snap(probe, first, monkeypatch, 1002.0, sinks=sinks(12))
    sink = stage(later, "sink")
    assert (sink.done, sink.waiting, sink.rate, sink.eta_seconds) == (12, 0, 6.0, 0.0)
    assert "sink: 12 of them buffered, written within --flush-seconds 30" \
        in render(later, KAFKA)
    assert stage(snap(probe, None, monkeypatch, 1.0, sinks=sinks(12, age=60.0)), "sink").done == 0  # died


def test_the_rate_is_measured_over_the_window_not_the_last_refresh(monkeypatch):
    probe = Probe([(0, 0, 100, "")])
    first = snap(probe, None, monkeypatch, 1000.0)
    assert stage(first, "generate").rate is None
    probe.parts[KAFKA.prompts_topic] = [(0, 20, 100, "")]
    second = snap(probe, first, monkeypatch, 1010.0)
    third = snap(probe, second, monkeypatch, 1012.0)  # nothing finished in the last 2 s
    assert stage(third, "generate").rate == 20 / 12
    probe.parts[KAFKA.prompts_topic] = [(0, 30, 100, "")]
    late = snap(probe, third, monkeypatch, 1068.0)  # the first sample left the window
    assert stage(late, "generate").rate == (30 - 20) / (1068 - 1010)
