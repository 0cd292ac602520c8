"""``eaglefeed export``: the dataset as JSON lines that SpecForge and speculators load as they are.

Both loaders take pre-tokenized rows from JSONL: SpecForge's ``data.prompts_path`` (rows with
``input_ids`` and ``loss_mask``: 1-D integer lists of equal length, a 0/1 mask with at least one
1; extra keys ignored) and speculators' ``prepare_data.py --data FILE.jsonl`` (passes rows with
``input_ids`` and ``loss_mask`` through after a length check and adds ``seq_len``). Rows are
streamed a batch at a time, so memory does not grow with the dataset, and the file appears
under its name only once it is complete.

Both loaders cut rows at their maximum length and drop rows left with no loss token, silently;
``max_length`` with a policy does that here instead, and counts exactly what it cost
(``eaglefeed.dataset.lengths``).

With ``lanes`` each ``tokens`` conversation lane is one row (``hidden_rows.lane_rows``, as
``load(..., lanes=True)``): its final turn's ids and a mask of 1 on every turn's generated ids,
the shape both frameworks train multi-turn data in. The lanes are joined in memory.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.identity import refuse_mixed
from eaglefeed.dataset.lengths import POLICIES, LengthCut, framework_cut
from eaglefeed.dataset.snapshot import iter_batches, snapshot

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
    """What one export wrote.

    Attributes:
        rows: rows written.
        tokens: tokens written.
        loss_tokens: loss tokens written.
        bytes: bytes written.
        cut: what ``max_length`` and its policy dropped or cut (None without ``max_length``).
        framework: without ``max_length``, what the loader's own default cut will do to the file.
        lanes: rows written that are conversation lanes of several turns (with ``lanes``).
    """

    rows: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    bytes: int = 0
    cut: LengthCut | None = None
    framework: LengthCut | None = None
    lanes: int = 0
    states: Any = None  # export_states.StatesSummary with hidden_states


def export(root: Path, *, fmt: str, out: Path | None, max_length: int | None = None,
           policy: str | None = None, hidden_states: dict[str, Any] | None = None,
           allow_mixed: bool = False, lanes: bool = False) -> ExportSummary:
    """Write the live rows of ``root`` as JSONL for ``fmt`` to ``out`` (stdout when None).

    Args:
        root: the dataset directory.
        fmt: ``specforge`` or ``speculators``.
        out: the output file (it appears only once complete), None for stdout.
        max_length: the longest row to write whole; None writes every row as it is and counts
            what the framework's default cut will do (``summary.framework``).
        policy: with ``max_length``: ``drop``, ``truncate`` or ``error``.
        hidden_states: also write the rows' states in ``fmt``'s offline layout beside ``out``
            (``export_states.export_states``'s keyword arguments; the same cut applies).
        allow_mixed: write rows of more than one tokenizer, chat template or model.
        lanes: each ``tokens`` conversation lane as one row (its final turn's ids, a mask on every
            turn's generated ids; with ``hidden_states`` its turns' files joined); the cut applies
            to the lane. Without it every turn is a row (and a later turn's states are refused).

    Raises:
        ValueError: ``fmt`` or ``policy`` is not known, or ``max_length`` is not positive.
        DatasetError: ``root`` is not a dataset, a file cannot be read, or ``policy`` is
            ``error`` and a row is longer than ``max_length`` (then nothing is written), or the rows
            were made with more than one identity and ``allow_mixed`` is false.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; one of {sorted(FORMATS)}")
    summary = ExportSummary()
    if max_length is not None:
        if max_length < 1 or policy not in POLICIES:
            raise ValueError(f"max_length must be positive with a policy in {POLICIES}, "
                             f"got {max_length!r} and {policy!r}")
        summary.cut = LengthCut(max_length=max_length, policy=policy)
    else:
        summary.framework = framework_cut(fmt)
    with snapshot(root) as files:
        refuse_mixed(files, allow_mixed=allow_mixed)
        joined = None
        if lanes:
            from eaglefeed.dataset.hidden_rows import lanes_of
            joined = lanes_of(root, files, FORMATS[fmt])
        if policy == "error" and max_length is not None:
            _refuse_long_rows(files, max_length, joined)
        if hidden_states is not None:
            if out is None:
                raise ValueError("hidden states are written beside an output file, not to stdout")
            from eaglefeed.dataset.export_states import export_states
            summary.states = export_states(root, files, fmt=fmt, folder=out.parent, max_length=max_length,
                                           policy=policy, lanes=lanes, **hidden_states)
        if out is None:
            _write(files, FORMATS[fmt], sys.stdout, summary, joined)
            return summary
        tmp = out.with_name(f".{out.name}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                _write(files, FORMATS[fmt], fh, summary, joined)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return summary


def _refuse_long_rows(files: list[Path], max_length: int, joined: list[dict[str, Any]] | None) -> None:
    """Policy ``error``: read only the lengths first, so that nothing is written when a row is too long."""
    check = LengthCut(max_length=max_length, policy="drop")
    if joined is not None:  # the lanes as the rows they are written as
        for row in joined:
            check.apply(row["id"], row["seq_len"], row["prompt_len"], _spans(row))
    else:
        for batch in iter_batches(files, columns=("id", "seq_len", "prompt_len"), batch_rows=65536):
            lengths = (batch.column(name).to_pylist() for name in ("id", "seq_len", "prompt_len"))
            for row_id, seq, prompt in zip(*lengths, strict=True):
                check.apply(row_id, seq, prompt)
    if check.over:
        raise DatasetError(
            f"{check.over} rows are longer than --max-length {max_length} ({check.dropped_loss_tokens} "
            f"loss tokens in them; first: {', '.join(check.first_over)}); nothing written "
            "(--length-policy drop or truncate, or a larger --max-length)")


def _write(files: list[Path], columns: tuple[str, ...], fh: IO[str], summary: ExportSummary,
           joined: list[dict[str, Any]] | None) -> None:
    read = tuple(dict.fromkeys((*columns, "id", "seq_len", "prompt_len")))
    lines = (_joined_lines(joined, columns, summary) if joined is not None else
             (line for batch in iter_batches(files, columns=read, batch_rows=256)
              for line in _lines(batch, columns, summary.cut, summary.framework)))
    for line, tokens, loss in lines:
        fh.write(line)
        summary.rows += 1
        summary.tokens += tokens
        summary.loss_tokens += loss
        summary.bytes += len(line)


def _spans(row: dict[str, Any]) -> np.ndarray | None:
    """A lane's mask (a span per turn) for the length cut's loss counts; None for one turn (0…0 1…1)."""
    return np.asarray(row["loss_mask"]) if row["turns"] > 1 else None


def _joined_lines(rows: Iterable[dict[str, Any]], columns: tuple[str, ...],
                  summary: ExportSummary) -> Iterator[tuple[str, int, int]]:
    """One JSON line per row of ``hidden_rows.lanes_of`` (a lane as one row), cut as ``_lines`` cuts."""
    cut, framework = summary.cut, summary.framework
    for row in rows:
        row_id, seq_len, prompt_len, spans = row["id"], row["seq_len"], row["prompt_len"], _spans(row)
        if framework is not None:
            framework.apply(row_id, seq_len, prompt_len, spans)
        keep = seq_len if cut is None else cut.apply(row_id, seq_len, prompt_len, spans)
        if keep == 0:
            continue
        record: dict[str, Any] = {}
        for name in columns:
            if name in ("input_ids", "loss_mask"):
                record[name] = [int(x) for x in row[name][:keep]]
            elif name == "seq_len":
                record[name] = keep
            else:
                record[RENAMED.get(name, name)] = row[name]
        summary.lanes += int(row["turns"] > 1)
        mask = record["loss_mask"]
        yield json.dumps(record, separators=(",", ":")) + "\n", len(mask), sum(mask)


def _lines(batch: pa.RecordBatch, columns: tuple[str, ...], cut: LengthCut | None,
           framework: LengthCut | None) -> Iterator[tuple[str, int, int]]:
    """One JSON line per row; list columns are sliced from their value buffers, not via to_pylist()."""
    lists = {}
    for name in ("input_ids", "loss_mask"):
        array = batch.column(name)
        lists[name] = (array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy())
    scalars = {name: batch.column(name).to_pylist() for name in ("id", "seq_len", "prompt_len", *columns)
               if name not in lists}
    for row in range(batch.num_rows):
        row_id, seq_len, prompt_len = scalars["id"][row], scalars["seq_len"][row], scalars["prompt_len"][row]
        if framework is not None:
            framework.apply(row_id, seq_len, prompt_len)
        keep = seq_len if cut is None else cut.apply(row_id, seq_len, prompt_len)
        if keep == 0:
            continue
        record = {}
        for name in columns:
            if name in lists:
                values, offsets = lists[name]
                start = offsets[row]
                record[name] = values[start:start + keep].tolist()
            elif name == "seq_len":
                record[name] = keep
            else:
                record[RENAMED.get(name, name)] = scalars[name][row]
        mask = record["loss_mask"]
        yield json.dumps(record, separators=(",", ":")) + "\n", len(mask), sum(mask)
