"""The sink's flush path without a broker: fake records in, segments + manifest + dead letters out."""

from collections import namedtuple
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from consumers.sink.loop import _CrashHook, _Sink, invalid_rows
from dataset import manifest
from eaglefeed.config import KafkaConfig, SinkConfig
from eaglefeed.metrics import SinkMetrics
from schemas import DEAD_LETTER, GENERATION
from schemas.columnar import decode_generations

Record = namedtuple("Record", "topic partition offset key value")
TP = TopicPartition("x.generations", 0)


def gen(i, *, output=(7, 8, 2), completion=None, tokenizer="t"):
    return {
        "id": f"p{i}:0", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [1, 2],
        "output_ids": list(output), "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": 2,
        "completion_tokens": len(output) if completion is None else completion, "cached_tokens": 0,
        "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v", "worker_id": "w",
        "source": "s", "source_row": str(i), "turn_index": 0, "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": tokenizer, "tokenizer_hash": "h",
        "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


class Delivered:
    def get(self, timeout=None):
        return None


class FakeProducer:
    def __init__(self):
        self.sent, self.flushed = [], 0

    def send(self, topic, key=None, value=None):
        self.sent.append((topic, key, DEAD_LETTER.decode(value)))
        return Delivered()

    def flush(self):
        self.flushed = len(self.sent)


SINKS = []


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    while SINKS:
        SINKS.pop().writer.close()


def make_sink(root: Path, **overrides):
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="x"), output=root, **overrides)
    producer = FakeProducer()
    sink = _Sink(cfg, SinkMetrics.create(CollectorRegistry()), producer)
    SINKS.append(sink)
    return sink, producer


def flush(sink, now=0.0, force=True):
    """Flush what is due, wait for the writer, return the offsets the sink would commit."""
    sink.flush_due(now, force=force)
    sink.writer.wait()
    return sink.commit(None)


def feed(sink, values, start=0, tp=TP):
    sink.add(tp, [Record(tp.topic, tp.partition, start + n, b"k", v) for n, v in enumerate(values)])


def read_ids(root):
    live = manifest.live_segments(manifest.read_manifest(root))
    return [i for rel in live for i in pq.read_table(root / rel, columns=["id"]).column("id").to_pylist()]


def test_a_flush_writes_new_rows_once_and_dead_letters_the_rest(tmp_path):
    sink, producer = make_sink(tmp_path)
    assert sink.open_partition(TP) is None
    sink.sync_index()
    values = [GENERATION.encode(gen(0)), GENERATION.encode(gen(1)), GENERATION.encode(gen(0)),  # re-delivery
              b"\x00garbage", GENERATION.encode(gen(2, completion=9)),  # counts disagree with the ids
              GENERATION.encode(gen(3, output=())), GENERATION.encode(gen(4))]
    feed(sink, values, start=100)
    assert flush(sink) == {TP: 107}
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p4:0"]
    kinds = sorted((d["error_kind"], d["offset"]) for _t, _k, d in producer.sent)
    assert kinds == [("invalid_generation", 104), ("invalid_generation", 105),
                     ("undecodable_generation", 103)]
    assert producer.flushed == 3  # acknowledged before the manifest moved past them
    assert {d["message"] for _t, _k, d in producer.sent if d["offset"] == 104} == {
        "completion_tokens 9 != 3 output ids"}
    (event,) = manifest.read_manifest(tmp_path)
    assert event["offsets"] == {"x.generations:0": [100, 106]}
    assert event["duplicates"] == 1 and event["dead_lettered"] == 3
    assert sink.summary.rows_written == 3 and sink.summary.duplicates_dropped == 1


def test_ids_written_before_a_restart_or_by_compaction_are_not_written_again(tmp_path):
    sink, _ = make_sink(tmp_path)
    sink.open_partition(TP)
    sink.sync_index()
    feed(sink, [GENERATION.encode(gen(i)) for i in range(3)])
    flush(sink)

    again, _ = make_sink(tmp_path)  # a restarted sink, on another partition this time
    other = TopicPartition(TP.topic, 1)
    assert again.open_partition(other) is None and again.open_partition(TP) == 3
    again.sync_index()
    feed(again, [GENERATION.encode(gen(i)) for i in (2, 1, 5)], tp=other)
    flush(again)
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p2:0", "p5:0"]
    assert again.summary.duplicates_dropped == 2


def test_a_flush_of_only_duplicates_still_moves_the_offsets(tmp_path):
    sink, _ = make_sink(tmp_path)
    sink.open_partition(TP)
    sink.sync_index()
    feed(sink, [GENERATION.encode(gen(1))])
    flush(sink)
    feed(sink, [GENERATION.encode(gen(1))] * 2, start=1)
    assert flush(sink) == {TP: 3}
    events = manifest.read_manifest(tmp_path)
    assert events[-1]["added"] == [] and manifest.resume_offsets(events) == {"x.generations:0": 3}


def test_buffers_roll_by_rows_bytes_and_age_and_the_total_is_capped(tmp_path):
    sink, _ = make_sink(tmp_path, flush_rows=3, flush_bytes=10**9, flush_seconds=60, max_buffer_bytes=10**9)
    sink.open_partition(TP)
    sink.sync_index()
    feed(sink, [GENERATION.encode(gen(i)) for i in range(2)])
    opened = sink.buffers[TP].opened
    assert flush(sink, opened + 1, force=False) == {}
    assert flush(sink, opened + 61, force=False) == {TP: 2}  # age
    feed(sink, [GENERATION.encode(gen(i)) for i in range(2, 9)], start=2)  # one poll of 7 records
    assert flush(sink, sink.buffers[TP].opened, force=False) == {TP: 8}  # two segments of exactly 3 rows
    assert len(sink.buffers[TP].messages) == 1
    live = manifest.live_segments(manifest.read_manifest(tmp_path))
    assert [e["rows"] for e in live.values()] == [2, 3, 3]

    capped, _ = make_sink(tmp_path / "b", flush_rows=100, flush_bytes=10**9, flush_seconds=60,
                          max_buffer_bytes=500)
    big, small = TopicPartition(TP.topic, 1), TopicPartition(TP.topic, 2)
    for tp in (big, small):
        capped.open_partition(tp)
    capped.sync_index()
    feed(capped, [GENERATION.encode(gen(i)) for i in range(4)], tp=big)
    feed(capped, [GENERATION.encode(gen(9))], tp=small)
    assert flush(capped, capped.buffers[big].opened, force=False) == {big: 4}  # the largest goes first


def test_a_lost_partition_drops_its_buffer_and_a_revoked_one_writes_it(tmp_path):
    sink, _ = make_sink(tmp_path)
    lost = TopicPartition(TP.topic, 1)
    for tp in (TP, lost):
        sink.open_partition(tp)
    sink.sync_index()
    feed(sink, [GENERATION.encode(gen(1))])
    feed(sink, [GENERATION.encode(gen(2))], tp=lost)
    sink.close_partition(lost, write=False)
    sink.close_partition(TP, write=True)
    assert read_ids(tmp_path) == ["p1:0"]
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {"x.generations:0": 1}


def test_uncommitted_files_of_the_partition_are_removed_on_open(tmp_path):
    seg = tmp_path / "segments"
    seg.mkdir()
    (seg / "x.generations-p0000-00000000000000000000-00000000000000000009.parquet").write_bytes(b"x")
    (seg / "x.generations-p0001-00000000000000000000-00000000000000000009.parquet").write_bytes(b"x")
    sink, _ = make_sink(tmp_path)
    sink.open_partition(TP)
    assert [p.name[:18] for p in seg.iterdir()] == ["x.generations-p000"]
    assert "p0001" in next(seg.iterdir()).name


def test_validation_reasons():
    recs = [gen(0), gen(1, output=()), gen(2, output=(5, -1)), gen(3, completion=1)]
    recs[0]["id"] = ""
    batch = decode_generations([GENERATION.encode(r) for r in recs]).batch
    assert invalid_rows(batch) == [(0, "empty id"), (1, "empty output"), (2, "negative token id"),
                                   (3, "completion_tokens 1 != 3 output ids")]


def test_the_crash_hook_only_knows_the_documented_steps():
    with pytest.raises(ValueError, match="unknown crash step"):
        _CrashHook("before_everything")
    hook = _CrashHook("after_rename:3")
    hook("after_rename")
    hook("after_manifest")
    assert hook.left == 2
    _CrashHook(None)("after_rename")  # no spec: never fires
