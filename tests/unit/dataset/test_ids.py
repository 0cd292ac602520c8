import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.dataset.ids import IdIndex
from eaglefeed.schemas.columnar import GenerationBatch


def gen(i):
    return {
        "id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [1], "output_ids": [2],
        "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 1, "completion_tokens": 1,
        "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v",
        "worker_id": "w", "source": "s", "source_row": str(i), "turn_index": 0, "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h", "chat_template_hash": "c",
        "prompt_created_at": 1, "created_at": 2,
    }


def commit_segment(root, partition, first, records):
    entry = shards.write_segment(root, shards.segment_name("g", partition, first, first + len(records) - 1),
                                 shards.batch_to_table(GenerationBatch.from_records(records)))
    manifest.append_manifest(root, {"kind": "flush", "added": [entry]})


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.text(max_size=6), max_size=30), max_size=8))
def test_claim_is_true_exactly_once_per_id_across_batches_and_merges(batches):
    index = IdIndex(min_merge=4)  # merge often, so lookups go through the sorted array too
    seen = set()
    for ids in batches:
        fresh = index.claim(ids)
        expected = []
        for i in ids:
            expected.append(i not in seen)
            seen.add(i)
        assert fresh == expected
    assert len(index) == len(seen)
    assert all(i in index for i in seen)


def test_sync_reads_each_file_once_and_survives_compaction(tmp_path):
    for n in range(4):
        commit_segment(tmp_path, n % 2, n * 5, [gen(n * 5 + k) for k in range(5)])
    index = IdIndex()
    assert index.sync(tmp_path) == 20 and index.sync(tmp_path) == 0
    compact(tmp_path, CompactOptions(target_bytes=10**9, include_partial=True))
    fresh = IdIndex()  # a sink starting after compaction: ids now come from one shard of all partitions
    assert fresh.sync(tmp_path) == 20
    assert fresh.claim([f"r{i}" for i in range(18, 23)]) == [False, False, True, True, True]
    assert index.sync(tmp_path) == 20  # the shard is new to the old index; reading it again is harmless
    assert len(index) == 20
    assert len(manifest.live_segments(manifest.read_manifest(tmp_path))) == 1


def test_digests_of_a_100k_row_dataset_stay_small():
    ids = [f"{n:032x}:0" for n in range(100_000)]  # ~8 MB as strings
    tracemalloc.start()
    try:
        index = IdIndex()
        index.claim(ids)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 4_000_000  # 16 bytes per id once merged, plus the recent set
    assert not any(index.claim([f"{n:032x}:0" for n in range(0, 100_000, 7)]))


def test_sync_parses_only_the_manifest_lines_appended_since_the_last(tmp_path):
    # What keeps a sink's memory and sync time flat as the manifest grows (issue 35): lines read
    # once are never parsed again. Proof: garbling them in place (same length) goes unnoticed.
    for n in range(3):
        commit_segment(tmp_path, 0, n * 5, [gen(n * 5 + k) for k in range(5)])
    index = IdIndex()
    assert index.sync(tmp_path) == 15
    path = tmp_path / manifest.MANIFEST
    path.write_bytes(b"".join(b"x" * (len(line) - 1) + b"\n" for line in path.read_bytes().splitlines(True)))
    commit_segment(tmp_path, 1, 0, [gen(100 + k) for k in range(4)])
    assert index.sync(tmp_path) == 4
    assert "r101" in index and "r7" in index


def test_sync_starts_over_on_a_new_manifest(tmp_path):
    commit_segment(tmp_path, 0, 0, [gen(k) for k in range(5)])
    index = IdIndex()
    assert index.sync(tmp_path) == 5
    (tmp_path / manifest.MANIFEST).unlink()  # the dataset deleted and begun again
    commit_segment(tmp_path, 0, 0, [gen(k) for k in range(2)])
    assert index.sync(tmp_path) == 2  # the new manifest's file, read from its first line
    assert index.sync(tmp_path) == 0
    assert "r1" in index and "r4" not in index  # the old manifest's ids are not the dataset's
    assert index.claim(["r4"]) == [True]
