"""GenerationRecord size on the wire after the topic's zstd, v2 (packed int32) against v1 (varints).

Not a test. The same records are encoded by both schema versions and compressed as the
producer does (zstd, level 3, batches of up to 256 KiB), for three kinds of token ids:
uniform over a 151k vocabulary (the worst case for both), Zipf-distributed over 151k (the
shape of real token frequencies) and real text through the demo tokenizer (4k vocabulary).

    .venv/bin/python -m bench.wire_size [--rows 1000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import zstandard
from tokenizers import Tokenizer

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import AvroCodec, codec_for

BATCH_BYTES = 256 * 1024  # the producer's batch_size (eaglefeed.core.kafka.make_producer)
SOURCES = ("eaglefeed", "producers", "consumers", "schemas", "bench")  # real folders (eaglefeed/ links the rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    v1, v2 = codec_for("generation", 1), codec_for("generation", 2)
    results = {}
    for kind, rows in _id_rows(args.rows).items():
        records = [_record(i, ids) for i, ids in enumerate(rows)]
        one, two = _wire_bytes(v1, records), _wire_bytes(v2, records)
        print(f"{kind:8s} ids: v1 {one[0]:6.0f} B raw, {one[1]:6.0f} B after zstd; "
              f"v2 {two[0]:6.0f} B raw, {two[1]:6.0f} B after zstd; v2 / v1 = {two[1] / one[1]:.2f}")
        results[f"wire_v1_{kind}_bytes"], results[f"wire_v2_{kind}_bytes"] = one[1], two[1]
    print("RESULT " + json.dumps(results))


def _id_rows(count: int) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    tokenizer = Tokenizer.from_file(str(Path(TOKENIZER_DIR) / "tokenizer.json"))
    root = Path(__file__).resolve().parent.parent  # the project's own sources, never a venv beside them
    corpus = "\n".join(p.read_text(encoding="utf-8") for folder in SOURCES for p in sorted((root / folder).rglob("*.py")))
    text = np.asarray(tokenizer.encode(corpus).ids)
    starts = rng.integers(0, max(1, len(text) - 2000), count)
    return {
        "uniform": [rng.integers(0, 151_000, 2000) for _ in range(count)],
        "zipf": [np.minimum(rng.zipf(1.2, 2000), 151_000) - 1 for _ in range(count)],
        "text": [np.resize(text[s:s + 2000], 2000) for s in starts],
    }


def _wire_bytes(codec: AvroCodec, records: list[dict[str, object]]) -> tuple[float, float]:
    """Mean bytes per record before and after zstd, in producer-sized batches."""
    compressor = zstandard.ZstdCompressor(level=3)
    messages = [codec.encode(r) for r in records]
    compressed, batch, size = 0, [], 0
    for m in messages:
        batch.append(m)
        size += len(m)
        if size >= BATCH_BYTES:
            compressed += len(compressor.compress(b"".join(batch)))
            batch, size = [], 0
    if batch:
        compressed += len(compressor.compress(b"".join(batch)))
    return sum(map(len, messages)) / len(messages), compressed / len(messages)


def _record(i: int, ids: np.ndarray) -> dict[str, object]:
    split = 300 + i % 400
    return {"id": f"{i:032x}:0", "prompt_id": f"{i:032x}", "sample_index": 0,
            "prompt_ids": ids[:split].tolist(), "output_ids": ids[split:].tolist(), "finish_reason": "stop",
            "matched_stop": 151645, "prompt_tokens": split, "completion_tokens": 2000 - split,
            "cached_tokens": 0, "latency_seconds": 12.5, "endpoint": "http://gpu-0:30000",
            "model_path": "Qwen/Qwen3-8B", "engine_version": "0.5.4", "engine": "sglang", "worker_id": "host-1",
            "source": "bench.jsonl", "source_row": str(i), "turn_index": 0,
            "sampling_params": '{"max_new_tokens": 2048, "sampling_seed": %d, "temperature": 0.6}' % i,
            "chat_template_kwargs": "{}", "tokenizer_id": "Qwen/Qwen3-8B", "tokenizer_hash": "ab" * 32,
            "chat_template_hash": "cd" * 32, "prompt_created_at": 1, "created_at": 2}


if __name__ == "__main__":
    main()
