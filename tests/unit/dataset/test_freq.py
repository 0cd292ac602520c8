"""Loss-token counts: written with each segment before its manifest event, kept by compaction, summed."""

import random
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.consumers.sink.writer import SegmentWriter, WriteJob
from eaglefeed.dataset import freq, manifest, shards
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.schemas.columnar import GenerationBatch
from tests.unit.dataset.test_export import gen, make_dataset

IDS = st.lists(st.integers(0, 300), max_size=6)


def counts_from_parquet(root):
    """The reference: every loss_mask 1 id of the live rows, read row by row."""
    total = Counter()
    for rel in manifest.live_segments(manifest.read_manifest(root)):
        for row in pq.read_table(root / rel, columns=["input_ids", "loss_mask"]).to_pylist():
            total.update(i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m)
    return total


def as_counter(counter):
    ids, counts = counter.sparse()
    return Counter(dict(zip(ids.tolist(), counts.tolist(), strict=True)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(IDS, IDS), max_size=8))
def test_counting_a_batch_counts_exactly_the_output_ids(rows):
    records = [gen(i, random.Random(i), 0, 0) | {"prompt_ids": p, "output_ids": o}
               for i, (p, o) in enumerate(rows)]
    batch = GenerationBatch.from_records(records)
    expected = Counter(i for _p, o in rows for i in o)
    assert as_counter(freq.count_batch(batch)) == expected
    assert as_counter(freq.count_table(shards.batch_to_table(batch))) == expected


def test_the_sink_writes_the_counts_durably_before_the_event_that_lists_them(tmp_path):
    steps = []

    def crash(step):
        steps.append(step)
        if step == "after_rename" and steps.count(step) == 2:
            # the second segment is on disk with its counts, and not yet in the manifest
            assert (tmp_path / "freq" / "s1.npz").is_file()
            assert len(manifest.read_manifest(tmp_path)) == 1
            raise OSError("crash")

    writer = SegmentWriter(tmp_path, crash=crash)
    for n in range(2):
        batch = GenerationBatch.from_records([gen(f"{n}-{k}", random.Random(k), 3, 5) for k in range(4)])
        writer.submit(WriteJob(key=0, event={"kind": "flush", "offsets": {"g:0": [n, n]}}, next_offset=n + 1,
                               name=f"s{n}.parquet", rows=batch))
    with pytest.raises(RuntimeError, match="crash"):
        writer.wait()
    (event,) = manifest.read_manifest(tmp_path)
    (entry,) = event["added"]
    assert entry["freq"] == "freq/s0.npz"
    ids, counts = freq.read_sidecar(tmp_path, entry["freq"])
    assert int(counts.sum()) == entry["loss_tokens"] == 20
    assert Counter(dict(zip(ids.tolist(), counts.tolist(), strict=True))) == counts_from_parquet(tmp_path)


def test_snapshot_totals_are_a_sum_of_sidecars_not_a_rescan(tmp_path, monkeypatch):
    root = tmp_path / "d"
    make_dataset(root, rows=60)  # no sidecars (a dataset from before them): counted from Parquet
    expected = counts_from_parquet(root)
    rescanned = freq.snapshot_counts(root)
    assert rescanned.from_sidecars == 0 and len(rescanned.rescanned) == 3
    assert as_counter(rescanned.counter) == expected

    sink_root = tmp_path / "s"
    writer = SegmentWriter(sink_root, crash=lambda step: None)
    rng = random.Random(1)
    for n in range(3):
        batch = GenerationBatch.from_records([gen(f"{n}-{k}", rng, rng.randint(1, 30), rng.randint(1, 30))
                                              for k in range(20)])
        writer.submit(WriteJob(key=0, event={"kind": "flush", "offsets": {"g:0": [n, n]}}, next_offset=n + 1,
                               name=f"s{n}.parquet", rows=batch))
    writer.close()

    def no_rescan(*args, **kwargs):
        raise AssertionError("a file with a sidecar was read again")

    monkeypatch.setattr(freq, "iter_batches", no_rescan)
    summed = freq.snapshot_counts(sink_root)
    assert summed.from_sidecars == 3 and not summed.rescanned and summed.rows == 60
    assert as_counter(summed.counter) == counts_from_parquet(sink_root)


def sink_dataset(root, segments, rows, seed=0):
    writer = SegmentWriter(root, crash=lambda step: None)
    rng = random.Random(seed)
    for n in range(segments):
        records = [gen(f"{n}-{k}", rng, rng.randint(1, 20), rng.randint(0, 6)) for k in range(rows)]
        for k, rec in enumerate(records):
            rec["finish_reason"] = "length" if k % 5 == 0 else "stop"
        batch = GenerationBatch.from_records(records)
        writer.submit(WriteJob(key=0, event={"kind": "flush", "offsets": {"g:0": [n, n]}}, next_offset=n + 1,
                               name=shards.segment_name("g", 0, n, n), rows=batch))
    writer.close()


def test_compaction_carries_the_counts_and_removes_what_filters_drop(tmp_path):
    sink_dataset(tmp_path, segments=6, rows=15)
    before = counts_from_parquet(tmp_path)
    summary = compact(tmp_path, CompactOptions(target_bytes=1, include_partial=True,
                                               drop_finish_reasons=frozenset({"length"}), min_loss_tokens=2))
    assert summary.shards and sum(summary.dropped.values()) > 0
    live = manifest.live_segments(manifest.read_manifest(tmp_path))
    assert all(entry["freq"].startswith("freq/shard-") for entry in live.values())
    after = counts_from_parquet(tmp_path)
    assert after != before  # the filter dropped rows, and their tokens with them
    summed = freq.snapshot_counts(tmp_path)
    assert not summed.rescanned and as_counter(summed.counter) == after
    assert summed.counter.total == sum(e["loss_tokens"] for e in live.values())
    # the inputs' sidecars went with the inputs
    assert sorted(p.name for p in (tmp_path / "freq").iterdir()) == sorted(
        e["freq"].split("/")[1] for e in live.values())


def test_counts_reject_a_negative_id():
    counter = freq.TokenCounter()
    with pytest.raises(Exception, match="negative token id"):
        counter.add_ids(np.array([3, -1], np.int32))


def test_a_lost_sidecar_is_made_up_for_by_counting_the_file(tmp_path):
    sink_dataset(tmp_path, segments=3, rows=10)
    live = manifest.live_segments(manifest.read_manifest(tmp_path))
    lost = next(iter(live.values()))
    (tmp_path / lost["freq"]).unlink()
    summed = freq.snapshot_counts(tmp_path)
    assert summed.rescanned == [lost["path"]] and summed.from_sidecars == 2
    assert as_counter(summed.counter) == counts_from_parquet(tmp_path)
