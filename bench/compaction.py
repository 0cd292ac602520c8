"""Compaction throughput: small sink segments of ~2000-token rows merged into training shards.

The baseline, measured in the same run, is reading the same segments and writing one Parquet
file with pyarrow (no manifest, no filters): what a hand-written merge would cost.

    python -m bench.compaction --segments 20 --rows 500
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.schemas.columnar import GenerationBatch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=20)
    parser.add_argument("--rows", type=int, default=500, help="rows per segment")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eaglefeed-bench-") as tmp:
        root = Path(tmp) / "dataset"
        _write_segments(root, args.segments, args.rows)
        rows = args.segments * args.rows
        files = [root / rel for rel in manifest.live_segments(manifest.read_manifest(root))]
        started = time.perf_counter()
        pq.write_table(pa.concat_tables(pq.read_table(f) for f in files), Path(tmp) / "merged.parquet",
                       compression="zstd")
        baseline = time.perf_counter() - started
        started = time.perf_counter()
        summary = compact(root, CompactOptions(target_bytes=1 << 40, include_partial=True))
        took = time.perf_counter() - started
        assert summary.rows_out == rows, summary
    print(f"compaction of {args.segments} segments x {args.rows} rows of ~2000 tokens: {rows / took:.0f} rows/s "
          f"({summary.bytes_in / took / 1e6:.0f} MB/s); baseline read+concat+write {rows / baseline:.0f} rows/s")
    print("RESULT " + json.dumps({"compaction_rows_per_s": rows / took,
                                  "compaction_baseline_rows_per_s": rows / baseline}))


def _write_segments(root: Path, count: int, rows: int) -> None:
    rng = random.Random(3)
    for s in range(count):
        records = []
        for r in range(rows):
            i = s * rows + r
            prompt = [rng.randrange(9, 4096) for _ in range(1200)]
            out = [rng.randrange(9, 4096) for _ in range(799)] + [2]
            records.append({
                "id": f"c{i}:0", "prompt_id": f"c{i}", "sample_index": 0, "prompt_ids": prompt,
                "output_ids": out, "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": 1200,
                "completion_tokens": 800, "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
                "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s",
                "source_row": str(i), "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}",
                "tokenizer_id": "t", "tokenizer_hash": "h", "chat_template_hash": "c",
                "prompt_created_at": 1, "created_at": 2})
        name = shards.segment_name("gen", 0, s * rows, s * rows + rows - 1)
        entry = shards.write_segment(root, name, shards.batch_to_table(GenerationBatch.from_records(records)))
        manifest.append_manifest(root, {"added": [entry], "offsets": {"gen:0": [s * rows, s * rows + rows - 1]}})


if __name__ == "__main__":
    main()
