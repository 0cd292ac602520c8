"""The sink's checkpoint without a broker: records in, segments + manifest + dead letters + offsets out."""

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.checkpoint import CrashHook, SinkCheckpoint
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import manifest
from eaglefeed.schemas import DEAD_LETTER, GENERATION
from tests.unit.consumers.sink.sink_support import gen, read_ids, records

TP = TopicPartition("x.generations", 0)


class Delivered:
    def __init__(self, error=None):
        self.error = error

    def get(self, timeout=None):
        if self.error is not None:
            raise self.error


class DeadLetters:
    """A producer that keeps what it is sent; ``fail`` makes every send's future raise."""

    def __init__(self, fail=None):
        self.sent, self.flushed, self.fail = [], 0, fail

    def send(self, topic, value=None, key=None):
        self.sent.append((topic, key, DEAD_LETTER.decode(value)))
        return Delivered(self.fail)

    def flush(self, timeout=None):
        self.flushed = len(self.sent)


class Positions:
    """The consumer calls a checkpoint makes: seeks, ``beginning_offsets`` and ``commit``.

    ``seek_to_beginning`` is recorded as a seek to ``"start"``; ``first`` holds first offsets
    other than 0 (records retention deleted).
    """

    def __init__(self, fail=None, first=None):
        self.seeks, self.commits, self.fail, self.first = {}, [], fail, first or {}

    def seek(self, tp, offset):
        self.seeks[tp] = offset

    def seek_to_beginning(self, *tps):
        self.seeks.update(dict.fromkeys(tps, "start"))

    def beginning_offsets(self, tps, timeout_ms=None):
        return {tp: self.first.get(tp, 0) for tp in tps}

    def commit(self, offsets):
        if self.fail is not None:
            raise self.fail
        self.commits.append({tp: meta.offset for tp, meta in offsets.items()})


@dataclass
class Sink:
    buffers: Buffers
    segments: SegmentBuilder
    checkpoint: SinkCheckpoint
    producer: DeadLetters
    consumer: Positions

    def feed(self, values, start=0, tp=TP):
        self.buffers.add(tp, records(tp, values, start))

    def flush(self, now=0.0, force=True):
        """Write what is due, wait for the writer, return the offsets committed."""
        for tp, messages in self.buffers.take_due(now, force=force):
            self.checkpoint.write(tp, messages)
        return self.checkpoint.drain()


SINKS = []


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    while SINKS:
        SINKS.pop().checkpoint.close()


def make_sink(root: Path, *, producer=None, consumer=None, **overrides) -> Sink:
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="x"), output=root, **overrides)
    metrics = SinkMetrics.create(CollectorRegistry())
    producer, consumer = producer or DeadLetters(), consumer or Positions()
    buffers = Buffers(cfg=cfg, metrics=metrics)
    ids = SinkIds(root=root, metrics=metrics)
    segments = SegmentBuilder(ids=ids, producer=producer, dead_letter_topic=cfg.kafka.dead_letter_topic,
                              metrics=metrics, crash=lambda step: None)
    checkpoint = SinkCheckpoint(root=root, consumer=consumer, buffers=buffers, segments=segments, ids=ids,
                                metrics=metrics, crash=lambda step: None)
    sink = Sink(buffers, segments, checkpoint, producer, consumer)
    SINKS.append(sink)
    return sink


def test_a_flush_writes_new_rows_once_and_dead_letters_the_rest(tmp_path):
    sink = make_sink(tmp_path)
    sink.checkpoint.assigned([TP])
    assert sink.consumer.seeks == {TP: "start"}  # nothing in the manifest: all of it
    values = [GENERATION.encode(gen(0)), GENERATION.encode(gen(1)), GENERATION.encode(gen(0)),  # re-delivery
              b"\x00garbage", GENERATION.encode(gen(2, completion=9)),  # counts disagree with the ids
              GENERATION.encode(gen(3, output=())), GENERATION.encode(gen(4))]
    sink.feed(values, start=100)
    assert sink.flush() == {TP: 107}
    assert sink.consumer.commits == [{TP: 107}]
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p4:0"]
    kinds = sorted((d["error_kind"], d["offset"]) for _t, _k, d in sink.producer.sent)
    assert kinds == [("invalid_generation", 104), ("invalid_generation", 105),
                     ("undecodable_generation", 103)]
    assert sink.producer.flushed == 3  # acknowledged before the manifest moved past them
    assert {d["message"] for _t, _k, d in sink.producer.sent if d["offset"] == 104} == {
        "completion_tokens 9 != 3 output ids"}
    assert all(d["stage"] == "sink" and d["topic"] == TP.topic for _t, _k, d in sink.producer.sent)
    (claim, event) = manifest.read_manifest(tmp_path)
    assert claim["kind"] == "claim" and list(claim["claims"]) == ["x.generations:0"]
    assert event["offsets"] == {"x.generations:0": [100, 106]}
    assert event["duplicates"] == 1 and event["dead_lettered"] == 3
    summary = sink.checkpoint.summary
    assert summary.rows_written == 3 and summary.duplicates_dropped == 1 and summary.dead_lettered == 3


def test_ids_written_before_a_restart_or_by_compaction_are_not_written_again(tmp_path):
    sink = make_sink(tmp_path)
    sink.checkpoint.assigned([TP])
    sink.feed([GENERATION.encode(gen(i)) for i in range(3)])
    sink.flush()

    again = make_sink(tmp_path)  # a restarted sink, on another partition this time
    other = TopicPartition(TP.topic, 1)
    again.checkpoint.assigned([other, TP])
    assert again.consumer.seeks == {TP: 3, other: "start"}  # the manifest's offset; `other` from 0
    again.feed([GENERATION.encode(gen(i)) for i in (2, 1, 5)], tp=other)
    again.flush()
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p2:0", "p5:0"]
    assert again.checkpoint.summary.duplicates_dropped == 2


def test_a_flush_of_only_duplicates_still_moves_the_offsets(tmp_path):
    sink = make_sink(tmp_path)
    sink.checkpoint.assigned([TP])
    sink.feed([GENERATION.encode(gen(1))])
    sink.flush()
    sink.feed([GENERATION.encode(gen(1))] * 2, start=1)
    assert sink.flush() == {TP: 3}
    events = manifest.read_manifest(tmp_path)
    assert events[-1]["added"] == [] and manifest.resume_offsets(events) == {"x.generations:0": 3}


def test_partitions_the_manifest_does_not_know_are_read_from_their_first_offset(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    known, new, trimmed = (TopicPartition(TP.topic, p) for p in range(3))
    manifest.append_manifest(tmp_path, {"kind": "flush", "added": [], "duplicates": 0, "dead_lettered": 0,
                                        "offsets": {f"{TP.topic}:0": [0, 6]}})
    sink = make_sink(tmp_path, consumer=Positions(first={trimmed: 40}))
    sink.checkpoint.assigned([known, new, trimmed])
    assert sink.consumer.seeks == {known: 7, new: "start", trimmed: "start"}
    assert ("the manifest has no offsets of x.generations partitions 1, 2: reading them from the beginning"
            in [r.getMessage() for r in caplog.records])
    caplog.clear()
    assert sink.checkpoint.commit() == {known: 7}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "x.generations-2 at 40" in warnings[0], warnings
    assert "of x.generations partition 2 (retention" in warnings[0] and "[" not in warnings[0]
    assert "x.generations-1" not in warnings[0]
    caplog.clear()
    sink.checkpoint.commit()
    assert "retention" not in caplog.text  # asked once per assignment


def test_a_lost_partition_drops_its_buffer_and_a_revoked_one_writes_it(tmp_path):
    sink = make_sink(tmp_path)
    lost = TopicPartition(TP.topic, 1)
    sink.checkpoint.assigned([TP, lost])
    sink.feed([GENERATION.encode(gen(1))])
    sink.feed([GENERATION.encode(gen(2))], tp=lost)
    sink.checkpoint.lost([lost])
    sink.checkpoint.revoked([TP])
    assert read_ids(tmp_path) == ["p1:0"]  # written before revoked() returned
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {"x.generations:0": 1}
    assert sink.buffers.buffered(TP) == 0 and sink.buffers.buffered(lost) == 0
    sink.feed([GENERATION.encode(gen(3))], start=1)  # a late record of a partition no longer ours
    assert sink.flush() == {}  # the revoked partition's next owner commits its offset; nothing else
    assert sink.checkpoint.summary.rows_written == 1  # its segment is counted now
    assert read_ids(tmp_path) == ["p1:0"]


def test_uncommitted_files_of_the_partition_are_removed_on_assignment(tmp_path):
    seg = tmp_path / "segments"
    seg.mkdir()
    (seg / "x.generations-p0000-00000000000000000000-00000000000000000009.parquet").write_bytes(b"x")
    (seg / "x.generations-p0001-00000000000000000000-00000000000000000009.parquet").write_bytes(b"x")
    sink = make_sink(tmp_path)
    sink.checkpoint.assigned([TP])
    assert [p.name for p in seg.iterdir()] == [
        "x.generations-p0001-00000000000000000000-00000000000000000009.parquet"]


def test_a_dead_letter_not_acknowledged_stops_the_flush_before_anything_is_recorded(tmp_path):
    sink = make_sink(tmp_path, producer=DeadLetters(fail=OSError("broker gone")))
    sink.checkpoint.assigned([TP])
    sink.feed([GENERATION.encode(gen(1)), b"\x00garbage"])
    with pytest.raises(OSError, match="broker gone"):
        sink.flush()
    assert manifest.live_segments(manifest.read_manifest(tmp_path)) == {} and sink.consumer.commits == []
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {}
    assert sink.checkpoint.summary.rows_written == 0


def test_a_failed_kafka_commit_is_only_a_warning(tmp_path, caplog):
    sink = make_sink(tmp_path, consumer=Positions(fail=OSError("coordinator moved")))
    sink.checkpoint.assigned([TP])
    sink.feed([GENERATION.encode(gen(1))])
    assert sink.flush() == {TP: 1}  # the manifest holds the offsets: that is what counts
    assert "offset commit failed" in caplog.text
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {"x.generations:0": 1}


def test_a_rebalance_reads_only_what_the_manifest_gained_since_the_last_one(tmp_path, monkeypatch):
    """The listener runs on kafka-python's IO thread: its cost must not grow with the dataset."""
    tps = [TopicPartition(TP.topic, p) for p in range(3)]
    for n in range(300):  # a dataset of 300 flushes
        manifest.append_manifest(tmp_path, {"kind": "flush", "added": [], "duplicates": 0, "dead_lettered": 0,
                                            "offsets": {f"{TP.topic}:{n % 3}": [n, n]}})
    sink = make_sink(tmp_path)  # reads the manifest once, at start-up
    sink.checkpoint.assigned(tps)
    assert sink.consumer.seeks == {tps[0]: 298, tps[1]: 299, tps[2]: 300}
    sink.checkpoint.revoked(tps)
    manifest.append_manifest(tmp_path, {"kind": "flush", "added": [], "duplicates": 0, "dead_lettered": 0,
                                        "offsets": {f"{TP.topic}:0": [400, 409]}})  # another sink's
    parsed = []
    real_loads = manifest.json.loads
    monkeypatch.setattr(manifest.json, "loads", lambda line: parsed.append(line) or real_loads(line))
    sink.checkpoint.assigned(tps)
    assert sink.consumer.seeks[tps[0]] == 410
    assert len(parsed) <= 3  # the other sink's flush and the claims, not the 300 events before them


def test_the_crash_hook_only_knows_the_documented_steps():
    with pytest.raises(ValueError, match="unknown crash step"):
        CrashHook("before_everything")
    hook = CrashHook("after_rename:3")
    hook("after_rename")
    hook("after_manifest")
    assert hook.left == 2
    CrashHook(None)("after_rename")  # no spec: never fires
