"""``eaglefeed export``: the dataset as JSON lines that SpecForge and speculators load as they are.

Both loaders take pre-tokenized rows from JSONL: SpecForge's ``data.prompts_path`` (rows with
``input_ids`` and ``loss_mask``: 1-D integer lists of equal length, a 0/1 mask with at least one
1; extra keys ignored) and speculators' ``prepare_data.py --data FILE.jsonl`` (passes rows with
``input_ids`` and ``loss_mask`` through after a length check and adds ``seq_len``). Rows are
streamed a batch at a time, so memory does not grow with the dataset, and the file appears
under its name only once it is complete.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow as pa

from dataset.snapshot import iter_batches, snapshot

# Columns written per format. The two loaders want the same fields today; the formats are kept
# apart so that each can follow its loader.
FORMATS: dict[str, tuple[str, ...]] = {
    "specforge": ("id", "input_ids", "loss_mask", "seq_len", "source_row"),
    "speculators": ("id", "input_ids", "loss_mask", "seq_len", "source_row"),
}
# Written under another name: the user's own row id (every shard, old ones too, has ``source_row``).
RENAMED = {"source_row": "source_id"}


@dataclass
class ExportSummary:
    """What one export wrote."""

    rows: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    bytes: int = 0


def export(root: Path, *, fmt: str, out: Path | None) -> ExportSummary:
    """Write the live rows of ``root`` as JSONL for ``fmt`` to ``out`` (stdout when None).

    Raises:
        ValueError: ``fmt`` is not a known format.
        DatasetError: ``root`` is not a dataset or a file cannot be read.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; one of {sorted(FORMATS)}")
    summary = ExportSummary()
    with snapshot(root) as files:
        if out is None:
            _write(files, FORMATS[fmt], sys.stdout, summary)
            return summary
        tmp = out.with_name(f".{out.name}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                _write(files, FORMATS[fmt], fh, summary)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return summary


def _write(files: list[Path], columns: tuple[str, ...], fh: IO[str], summary: ExportSummary) -> None:
    for batch in iter_batches(files, columns=columns, batch_rows=256):
        for line, tokens, loss in _lines(batch, columns):
            fh.write(line)
            summary.rows += 1
            summary.tokens += tokens
            summary.loss_tokens += loss
            summary.bytes += len(line)


def _lines(batch: pa.RecordBatch, columns: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    """One JSON line per row; list columns are sliced from their value buffers, not via to_pylist()."""
    lists = {}
    for name in ("input_ids", "loss_mask"):
        array = batch.column(name)
        lists[name] = (array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy())
    scalars = {name: batch.column(name).to_pylist() for name in columns if name not in lists}
    for row in range(batch.num_rows):
        record = {}
        for name in columns:
            if name in lists:
                values, offsets = lists[name]
                record[name] = values[offsets[row]:offsets[row + 1]].tolist()
            else:
                record[RENAMED.get(name, name)] = scalars[name][row]
        mask = record["loss_mask"]
        yield json.dumps(record, separators=(",", ":")) + "\n", len(mask), sum(mask)
