"""Helpers of the sink's unit tests: GenerationRecords, consumed records, a dataset reader."""

from collections import namedtuple
from pathlib import Path

import pyarrow.parquet as pq

from eaglefeed.dataset import manifest

Record = namedtuple("Record", "topic partition offset key value")


def gen(i, *, output=(7, 8, 2), completion=None, tokenizer="t"):
    """A valid GenerationRecord ``p{i}:0`` (pass ``output``/``completion`` to make it invalid)."""
    return {
        "id": f"p{i}:0", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [1, 2],
        "output_ids": list(output), "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": 2,
        "completion_tokens": len(output) if completion is None else completion, "cached_tokens": 0,
        "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v", "worker_id": "w",
        "source": "s", "source_row": str(i), "turn_index": 0, "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": tokenizer, "tokenizer_hash": "h",
        "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


def records(tp, values, start=0):
    """Consumed records of ``tp`` holding ``values``, at offsets ``start``, ``start + 1``, ..."""
    return [Record(tp.topic, tp.partition, start + n, b"k", v) for n, v in enumerate(values)]


def read_ids(root: Path):
    """The ids of every live segment of the dataset at ``root``, in manifest order."""
    live = manifest.live_segments(manifest.read_manifest(root))
    return [i for rel in live for i in pq.read_table(root / rel, columns=["id"]).column("id").to_pylist()]
