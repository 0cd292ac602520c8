"""The rows a hidden-state export reads (ids, mask, state reference), checked before anything is written."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.export_states.summary import StatesSummary
from eaglefeed.dataset.hidden_states import (
    HiddenStatesError,
    HiddenStatesRef,
    open_scales,
    open_states,
    read_header,
    to_bfloat16,
    to_float32,
)
from eaglefeed.dataset.lengths import LengthCut

_ROW_COLUMNS = ("id", "input_ids", "loss_mask", "seq_len", "prompt_len")


@dataclass(frozen=True)
class StateRow:
    """One row of a segment: what a layout writes of it, and its states' reference (None without)."""

    row_id: str
    input_ids: np.ndarray
    loss_mask: np.ndarray
    seq_len: int
    prompt_len: int
    ref: HiddenStatesRef | None


def check_rows(root: Path, files: list[Path], skip_missing: bool,
               summary: StatesSummary) -> tuple[tuple[int, ...], int]:
    """Before writing: rows without states, one set of layers and dtype for all, and layer N among them.

    Layers are vLLM ids (0 = embeddings, k = entering decoder layer k, N = the last layer's output
    *before* the final norm). Both layouts need layer N among the row's layers; the others are the
    auxiliary layers, ascending. Returns the rows' layers and N.
    """
    missing: list[str] = []
    partial: list[str] = []
    layers: tuple[int, ...] | None = None
    first: HiddenStatesRef | None = None
    for row in read_rows(files, states_only=True):
        if row.ref is None:
            missing.append(row.row_id)
            continue
        if row.ref.start:
            partial.append(row.row_id)
        if first is None:
            first, layers = row.ref, row.ref.layer_ids
            summary.dtype = row.ref.dtype
        elif row.ref.layer_ids != layers or row.ref.dtype != summary.dtype:
            raise DatasetError(f"row {row.row_id} has layers {list(row.ref.layer_ids)} ({row.ref.dtype}), "
                               f"{first.uri} {list(layers or ())} ({summary.dtype}): a training run needs "
                               "one set of layers and one dtype")
    if partial:
        raise DatasetError(f"{len(partial)} rows are later turns of tokens conversation lanes, whose files "
                           f"hold only the positions their earlier turns do not (first: {partial[0]}): the "
                           "exports do not join lanes yet; eaglefeed.load(DIR, hidden_states=True, "
                           "lanes=True) gives each lane as one row")
    if missing and not skip_missing:
        raise DatasetError(f"{len(missing)} rows have no hidden states (first: {', '.join(missing[:3])}); "
                           "nothing written (--skip-missing-states leaves them out)")
    summary.missing = len(missing)
    if first is None or layers is None:
        raise DatasetError("no row has hidden states: nothing to export")
    try:
        meta = read_header(Path(root) / first.uri).metadata
        last = int(meta["num_hidden_layers"])
    except (HiddenStatesError, KeyError, ValueError) as exc:
        raise DatasetError(f"{first.uri}: cannot tell the model's layer count: {exc}") from exc
    if last not in layers:
        raise DatasetError(
            f"{summary.fmt} needs the last layer N = {last} (vLLM's id: the last decoder layer's output, "
            f"before the final norm) among the captured layers; the rows have {list(layers)}. Capture "
            f"with layer {last} among the hidden-state layers")
    if len(layers) < 2:
        raise DatasetError(f"the rows hold only layer {last}: EAGLE-3 needs auxiliary layers beside it")
    return layers, last


def read_rows(files: list[Path], *, states_only: bool = False) -> Iterator[StateRow]:
    """The rows of ``files`` in order, with their references (None without states)."""
    for path in files:
        try:
            reader = pq.ParquetFile(path)
            has_states = "hidden_states" in reader.schema_arrow.names
            columns = ["id", "hidden_states"] if states_only else [*_ROW_COLUMNS, "hidden_states"]
            batches = reader.iter_batches(batch_size=256, columns=[c for c in columns
                                                                   if has_states or c != "hidden_states"])
            for batch in batches:
                yield from _batch_rows(batch, states_only=states_only)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {path}: {exc}") from exc


def kept_length(row: StateRow, cut: LengthCut | None, summary: StatesSummary) -> int:
    """T': the positions to write (0 leaves the row out).

    The store file holds ``[T, L, H]`` for T = ``input_ids[:-1]`` (the last token's state predicts
    nothing the row holds). Both frameworks want one state per id of the row they train on, so the
    row written beside the states is ``input_ids[:T']`` and ``loss_mask[:T']``, with T' = T, or the
    kept length when ``cut`` shortens the row (then the states are cut alike). A row left with no
    loss token in those T' positions is left out and counted.
    """
    assert row.ref is not None
    keep = row.seq_len if cut is None else cut.apply(row.row_id, row.seq_len, row.prompt_len)
    kept = min(keep, row.ref.shape[0])
    if kept and not row.loss_mask[:kept].any():
        summary.no_loss += 1
        return 0
    return kept


def row_states(root: Path, ref: HiddenStatesRef, stop: int) -> tuple[np.ndarray, str]:
    """The first ``stop`` positions of the states ``ref`` names (``[T', L, H]``) and their dtype.

    The stored dtype, mapped; fp8 dequantized to bfloat16 (uint16 bits), a copy of what is asked,
    as speculators' ``FP8Transfer`` gives it. ``DatasetError`` where they cannot be read.
    """
    try:
        states = open_states(root, ref)[:stop]
        scales = open_scales(root, ref)
    except HiddenStatesError as exc:
        raise DatasetError(str(exc)) from exc
    if scales is None:
        return states, ref.dtype
    return to_bfloat16(to_float32(states, ref.dtype, scales[:stop])), "bfloat16"


def _batch_rows(batch: pa.RecordBatch, *, states_only: bool) -> Iterator[StateRow]:
    names = batch.schema.names
    refs = batch.column("hidden_states").to_pylist() if "hidden_states" in names else [None] * batch.num_rows
    ids = batch.column("id").to_pylist()
    empty = np.zeros(0, np.int64)
    if states_only:
        for row_id, ref in zip(ids, refs, strict=True):
            yield StateRow(row_id, empty, empty, 0, 0, HiddenStatesRef.from_record(ref) if ref else None)
        return
    lists = {}
    for name in ("input_ids", "loss_mask"):
        array = batch.column(name)
        lists[name] = (array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy())
    seq = batch.column("seq_len").to_pylist()
    prompt = batch.column("prompt_len").to_pylist()
    for i, (row_id, ref) in enumerate(zip(ids, refs, strict=True)):
        values, offsets = lists["input_ids"]
        mask_values, mask_offsets = lists["loss_mask"]
        yield StateRow(row_id, values[offsets[i]:offsets[i + 1]],
                       mask_values[mask_offsets[i]:mask_offsets[i + 1]], int(seq[i]), int(prompt[i]),
                       HiddenStatesRef.from_record(ref) if ref else None)
