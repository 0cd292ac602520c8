"""Helpers of the sink's unit tests: GenerationRecords, consumed records, a dataset reader."""

from collections import namedtuple
from pathlib import Path

import pyarrow.parquet as pq

from eaglefeed.dataset import manifest
from tests.factories import generation_record

Record = namedtuple("Record", "topic partition offset key value")


def gen(i, *, output=(7, 8, 2), completion=None, tokenizer="t"):
    """A valid GenerationRecord ``p{i}:0`` (pass ``output``/``completion`` to make it invalid)."""
    return generation_record(id=f"p{i}:0", prompt_id=f"p{i}", prompt_ids=[1, 2], output_ids=list(output),
                             completion_tokens=completion, source_row=str(i), tokenizer=tokenizer)


def records(tp, values, start=0):
    """Consumed records of ``tp`` holding ``values``, at offsets ``start``, ``start + 1``, ..."""
    return [Record(tp.topic, tp.partition, start + n, b"k", v) for n, v in enumerate(values)]


def read_ids(root: Path):
    """The ids of every live segment of the dataset at ``root``, in manifest order."""
    live = manifest.live_segments(manifest.read_manifest(root))
    return [i for rel in live for i in pq.read_table(root / rel, columns=["id"]).column("id").to_pylist()]
