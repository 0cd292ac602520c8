"""The rows a hidden-state export reads (ids, mask, state files), checked before anything is written.

A row's states are one file; with ``lanes`` a ``tokens`` conversation lane is one row whose states
are its turns' files in turn order, joined by ``hidden_rows`` as ``load(..., lanes=True)`` joins them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.export_states.summary import StatesSummary
from eaglefeed.dataset.hidden_rows import HiddenStates, LaneStates, lanes_of
from eaglefeed.dataset.hidden_states import (
    HiddenStatesError,
    HiddenStatesRef,
    read_header,
    to_bfloat16,
    to_float32,
)
from eaglefeed.dataset.lengths import LengthCut

_ROW_COLUMNS = ("id", "input_ids", "loss_mask", "seq_len", "prompt_len")


@dataclass(frozen=True)
class StateRow:
    """One row to export: what a layout writes of it, and its state files in position order.

    ``refs`` is one file for a row, a lane's turns' files for a lane (``turns`` > 1: its mask has a
    span per turn), and empty for a row without states.
    """

    row_id: str
    input_ids: np.ndarray
    loss_mask: np.ndarray
    seq_len: int
    prompt_len: int
    refs: tuple[HiddenStatesRef, ...]
    turns: int = 1

    @property
    def ref(self) -> HiddenStatesRef | None:
        """The first file (the only one, but in a lane): its layers, dtype and hidden size are the row's."""
        return self.refs[0] if self.refs else None

    @property
    def positions(self) -> int:
        """T: the positions the row's files hold together."""
        return sum(ref.shape[0] for ref in self.refs)

    def states(self, root: Path) -> HiddenStates | LaneStates:
        """The row's states, opened lazily: a lane's are its files joined (``hidden_rows.LaneStates``)."""
        return HiddenStates(root, self.refs[0]) if len(self.refs) == 1 else LaneStates(root, self.refs)


def check_rows(root: Path, rows: Iterable[StateRow], skip_missing: bool,
               summary: StatesSummary) -> tuple[tuple[int, ...], int]:
    """Before writing: rows without states, one set of layers and dtype for all, and layer N among them.

    Layers are vLLM ids (0 = embeddings, k = entering decoder layer k, N = the last layer's output
    *before* the final norm). Both layouts need layer N among the row's layers; the others are the
    auxiliary layers, ascending. A later turn of a lane, read as a row of its own (without
    ``lanes``), holds only part of its span: it is refused. Returns the rows' layers and N.
    """
    missing: list[str] = []
    partial: list[str] = []
    layers: tuple[int, ...] | None = None
    first: HiddenStatesRef | None = None
    for row in rows:
        if row.ref is None:
            missing.append(row.row_id)
            continue
        if row.ref.start:
            partial.append(row.row_id)
        for ref in row.refs:  # a lane's every file
            if first is None:
                first, layers = ref, ref.layer_ids
                summary.dtype = ref.dtype
            elif ref.layer_ids != layers or ref.dtype != summary.dtype:
                raise DatasetError(f"row {row.row_id} has layers {list(ref.layer_ids)} ({ref.dtype}), "
                                   f"{first.uri} {list(layers or ())} ({summary.dtype}): a training run "
                                   "needs one set of layers and one dtype")
    if partial:
        raise DatasetError(f"{len(partial)} rows are later turns of tokens conversation lanes, whose files "
                           f"hold only the positions their earlier turns do not (first: {partial[0]}): "
                           "pass --lanes to export each lane as one row, its turns' files joined (as "
                           "eaglefeed.load(DIR, hidden_states=True, lanes=True) gives it)")
    if missing and not skip_missing:
        raise DatasetError(f"{len(missing)} rows have no hidden states (first: {', '.join(missing[:3])}); "
                           "nothing written (--skip-missing-states leaves them out; a lane has states when "
                           "each of its turns has its file)")
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
    """The rows of ``files`` in order, each with its file (none without states)."""
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


def lane_rows_of(root: Path, files: Sequence[Path]) -> list[StateRow]:
    """The rows of ``files`` with each ``tokens`` conversation lane as one row, as ``load(lanes=True)``.

    ``hidden_rows.lanes_of`` joins them: the lane's final turn's ids, a mask of 1 on every turn's
    generated ids, its turns' files (a lane none of whose files is missing; else it has no states).
    """
    out = []
    for row in lanes_of(root, files):
        states = row["hidden_states"]
        refs = (() if states is None else states.refs if isinstance(states, LaneStates) else (states.ref,))
        out.append(StateRow(row["id"], np.asarray(row["input_ids"], np.int64),
                            np.asarray(row["loss_mask"], np.int64), int(row["seq_len"]),
                            int(row["prompt_len"]), refs, int(row["turns"])))
    return out


def kept_length(row: StateRow, cut: LengthCut | None, summary: StatesSummary) -> int:
    """T': the positions to write (0 leaves the row out).

    The store file holds ``[T, L, H]`` for T = ``input_ids[:-1]`` (the last token's state
    predicts nothing the row holds; a lane's files hold its final turn's T together). Both
    frameworks want one state per id of the row they train on, so the row written beside the
    states is ``input_ids[:T']`` and ``loss_mask[:T']``, with T' = T, or the kept length when
    ``cut`` shortens the row (then the states are cut alike; a lane is cut as the one row it is,
    its loss tokens counted on its mask). A row left with no loss token in those T' positions is
    left out and counted.
    """
    assert row.refs
    spans = row.loss_mask if row.turns > 1 else None
    keep = row.seq_len if cut is None else cut.apply(row.row_id, row.seq_len, row.prompt_len, spans)
    kept = min(keep, row.positions)
    if kept and not row.loss_mask[:kept].any():
        summary.no_loss += 1
        return 0
    return kept


def row_states(root: Path, row: StateRow, stop: int) -> tuple[np.ndarray, str]:
    """The first ``stop`` positions of the row's states (``[T', L, H]``) and their dtype.

    The stored dtype, mapped (a lane's joined); fp8 dequantized to bfloat16 (uint16 bits), a copy
    of what is asked, as speculators' ``FP8Transfer`` gives it. ``DatasetError`` where they cannot
    be read.
    """
    assert row.ref is not None
    states = row.states(root)
    raw, scales = states.raw[:stop], states.scales
    if scales is None:
        return raw, row.ref.dtype
    return to_bfloat16(to_float32(raw, row.ref.dtype, scales[:stop])), "bfloat16"


def _batch_rows(batch: pa.RecordBatch, *, states_only: bool) -> Iterator[StateRow]:
    names = batch.schema.names
    refs = batch.column("hidden_states").to_pylist() if "hidden_states" in names else [None] * batch.num_rows
    ids = batch.column("id").to_pylist()
    empty = np.zeros(0, np.int64)
    if states_only:
        for row_id, ref in zip(ids, refs, strict=True):
            yield StateRow(row_id, empty, empty, 0, 0, (HiddenStatesRef.from_record(ref),) if ref else ())
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
                       (HiddenStatesRef.from_record(ref),) if ref else ())
