import hashlib
import threading
import time

import pyarrow.parquet as pq
import pytest

from eaglefeed.core.errors import CompactionBusyError
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, collect_garbage, compact
from eaglefeed.dataset.ids import IdIndex
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.schemas.columnar import GenerationBatch


def gen(i, finish="stop", output_len=3):
    return {
        "id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [1, 2],
        "output_ids": [5] * output_len, "finish_reason": finish, "matched_stop": None, "prompt_tokens": 2,
        "completion_tokens": output_len, "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
        "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i),
        "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


def commit_segment(root, partition, first, records):
    """What the sink does for one segment: write + rename, then the manifest event."""
    last = first + len(records) - 1
    entry = shards.write_segment(root, shards.segment_name("g", partition, first, last),
                                 shards.batch_to_table(GenerationBatch.from_records(records)))
    manifest.append_manifest(root, {"kind": "flush", "added": [entry],
                                    "offsets": {f"g:{partition}": [first, last]}})
    return entry


def live_ids(root):
    with snapshot(root) as files:
        return [i for b in iter_batches(files, columns=["id"]) for i in b.column("id").to_pylist()]


def test_small_segments_become_shards_and_the_inputs_go(tmp_path):
    sizes = [commit_segment(tmp_path, n % 2, n * 10, [gen(n * 10 + k) for k in range(10)])["data_bytes"]
             for n in range(6)]
    summary = compact(tmp_path, CompactOptions(target_bytes=int(sum(sizes[:3]) * 0.99)))
    assert summary.shards == 2 and summary.inputs == 6 and summary.rows_out == 60
    live = manifest.live_segments(manifest.read_manifest(tmp_path))
    assert all(p.startswith("segments/shard-") for p in live) and len(live) == 2
    for rel, entry in live.items():
        assert hashlib.sha256((tmp_path / rel).read_bytes()).hexdigest() == entry["sha256"]
    assert sorted(live_ids(tmp_path)) == sorted(f"r{i}" for i in range(60))
    assert sorted(p.name for p in (tmp_path / "segments").iterdir()) == sorted(p.split("/")[1] for p in live)
    assert pq.read_table(tmp_path / "segments").num_rows == 60  # a plain directory read agrees when idle
    # offsets are untouched, so a sink resumes where it was
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {"g:0": 50, "g:1": 60}


def test_a_partial_group_waits_unless_asked(tmp_path):
    for n in range(3):
        commit_segment(tmp_path, 0, n * 5, [gen(n * 5 + k) for k in range(5)])
    assert compact(tmp_path, CompactOptions(target_bytes=10**9)).shards == 0
    assert compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True)).shards == 1
    again = compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True))
    assert again.shards == 0  # nothing left to do


def test_filters_drop_rows_and_remember_their_ids(tmp_path):
    commit_segment(tmp_path, 0, 0, [gen(0), gen(1, finish="length"), gen(2, output_len=1),
                                    gen(3, finish="abort")])
    commit_segment(tmp_path, 0, 4, [gen(4)])
    options = CompactOptions(target_bytes=10**9, include_partial=True,
                             drop_finish_reasons=frozenset({"length", "abort"}), min_loss_tokens=2)
    summary = compact(tmp_path, options)
    assert sorted(live_ids(tmp_path)) == ["r0", "r4"]
    assert summary.dropped == {"finish_reason:length": 1, "finish_reason:abort": 1, "min_loss_tokens": 1}
    (dropped,) = manifest.dropped_files(manifest.read_manifest(tmp_path))
    assert sorted(pq.read_table(tmp_path / dropped["path"]).column("id").to_pylist()) == ["r1", "r2", "r3"]
    index = IdIndex()
    index.sync(tmp_path)
    assert index.claim(["r1", "r4", "r9"]) == [False, False, True]  # a filtered row is not written again
    # the same filter again has nothing left to do
    stricter_already = CompactOptions(target_bytes=1, drop_finish_reasons=frozenset({"length"}))
    assert compact(tmp_path, stricter_already).shards == 0


def test_a_crash_before_the_manifest_event_leaves_nothing_visible(tmp_path):
    for n in range(2):
        commit_segment(tmp_path, 0, n * 3, [gen(n * 3 + k) for k in range(3)])
    before = manifest.live_segments(manifest.read_manifest(tmp_path))

    def crash(step):
        if step == "after_rename":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True), hook=crash)
    assert manifest.live_segments(manifest.read_manifest(tmp_path)) == before
    assert any(p.name.startswith("shard-") for p in (tmp_path / "segments").iterdir())  # orphan on disk
    assert sorted(live_ids(tmp_path)) == [f"r{i}" for i in range(6)]
    compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True))
    assert len(list((tmp_path / "segments").iterdir())) == 1
    assert sorted(live_ids(tmp_path)) == [f"r{i}" for i in range(6)]


def test_a_crash_after_the_event_leaves_inputs_that_readers_ignore_and_gc_removes(tmp_path):
    for n in range(2):
        commit_segment(tmp_path, 0, n * 3, [gen(n * 3 + k) for k in range(3)])

    def crash(step):
        if step == "after_manifest":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True), hook=crash)
    assert len(list((tmp_path / "segments").iterdir())) == 3
    assert sorted(live_ids(tmp_path)) == [f"r{i}" for i in range(6)]
    with snapshot(tmp_path):
        assert collect_garbage(tmp_path) == 0  # a reader holds the dataset: nothing is deleted under it
    assert collect_garbage(tmp_path) == 2


def test_one_compaction_at_a_time(tmp_path):
    commit_segment(tmp_path, 0, 0, [gen(0)])
    with manifest.locked(tmp_path, manifest.COMPACT_LOCK):
        with pytest.raises(CompactionBusyError):
            compact(tmp_path, CompactOptions())


def test_compaction_running_while_a_sink_writes_never_loses_or_doubles_a_row(tmp_path):
    """A writer commits segments the way the sink does while compaction runs in a loop and
    readers take snapshots: every snapshot holds each committed row exactly once."""
    committed: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def sink():
        try:
            for n in range(60):
                records = [gen(n * 4 + k) for k in range(4)]
                commit_segment(tmp_path, n % 3, n * 4, records)
                committed.extend(r["id"] for r in records)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            stop.set()

    merged = []

    def compactor():
        try:
            while not stop.is_set():
                merged.append(compact(tmp_path, CompactOptions(target_bytes=8000)).shards)
                time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    manifest.append_manifest(tmp_path, {"kind": "flush", "added": [], "offsets": {}})
    threads = [threading.Thread(target=sink), threading.Thread(target=compactor)]
    for t in threads:
        t.start()
    checks = 0
    while not stop.is_set():
        seen_before = list(committed)
        ids = live_ids(tmp_path)
        assert len(ids) == len(set(ids)), "a row appears twice"
        assert set(seen_before) <= set(ids), "a committed row is missing"
        checks += 1
        time.sleep(0.01)
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    compact(tmp_path, CompactOptions(target_bytes=8000, include_partial=True))
    ids = live_ids(tmp_path)
    assert sorted(ids) == sorted(committed) and len(ids) == 240
    assert checks > 3 and sum(merged) >= 3, (checks, merged)  # the three really ran side by side


def test_compact_below_the_target_hints_at_include_partial(tmp_path, capsys):
    from eaglefeed.cli.main import main

    commit_segment(tmp_path, 0, 0, [gen(0), gen(1)])
    commit_segment(tmp_path, 1, 0, [gen(2)])
    assert main(["compact", str(tmp_path), "--target-bytes", str(1 << 30)]) == 0
    out = capsys.readouterr().out
    assert "0 shards" in out and "add --include-partial" in out
    assert main(["compact", str(tmp_path), "--include-partial"]) == 0
    assert "--include-partial" not in capsys.readouterr().out


def test_segments_of_row_schema_1_compact_with_current_ones(tmp_path):
    """A dataset upgraded in place: files without the engine column merge with files that have it."""
    old = shards.batch_to_table(GenerationBatch.from_records([gen(k) for k in range(5)]))
    old = old.drop_columns(["engine"])
    name = shards.segment_name("g", 0, 0, 4)
    with shards.ParquetFile(tmp_path, name) as out:
        out._writer.close()  # write the old file with its own (version 1) schema
        out._writer = pq.ParquetWriter(out.tmp, old.schema)
        out.write(old)
    manifest.append_manifest(tmp_path, {"kind": "flush", "added": [out.entry], "offsets": {"g:0": [0, 4]}})
    assert pq.read_schema(tmp_path / "segments" / name).names.count("engine") == 0
    commit_segment(tmp_path, 0, 5, [{**gen(k), "engine": "vllm"} for k in range(5, 10)])
    summary = compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True))
    assert summary.rows_out == 10
    with snapshot(tmp_path) as files:
        engines = [e for b in iter_batches(files, columns=["engine"]) for e in b.column("engine").to_pylist()]
    assert sorted(engines, key=str) == [None] * 5 + ["vllm"] * 5
