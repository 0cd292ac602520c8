"""``eaglefeed.load(DIR, hidden_states=True)``: the rows, each with its states opened lazily (mmap)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.hidden_states import (
    FP8,
    HiddenStatesError,
    HiddenStatesRef,
    open_scales,
    open_states,
    to_bfloat16,
    to_float32,
)
from eaglefeed.dataset.shards import TRAINING_SCHEMA
from eaglefeed.dataset.snapshot import read_table

JOIN_COLUMNS = ("id", "input_ids", "loss_mask", "seq_len", "prompt_len", "turn_index", "conversation_id",
                "history_mode", "lane", "hidden_states")
"""The columns :func:`lane_rows` reads."""


@dataclass(frozen=True)
class HiddenStates:
    """One row's states: ``[T, L, H]`` for T = prompt + output[:-1], the layers ``layer_ids`` ascending.

    Nothing is read until asked: :attr:`raw` maps the file (the stored values; bf16 as its uint16
    bits, fp8 as its e4m3 codes, with :attr:`scales`), :meth:`float32` widens them (fp8: scaled),
    :meth:`torch` gives a tensor of the stored dtype over the same memory (no copy; fp8 dequantized
    to bfloat16, a copy, as speculators' ``FP8Transfer`` gives it).
    """

    root: Path
    ref: HiddenStatesRef

    @property
    def shape(self) -> tuple[int, ...]:
        """``[T, L, H]``."""
        return self.ref.shape

    @property
    def layer_ids(self) -> tuple[int, ...]:
        """The layers along axis 1, ascending (vLLM ids)."""
        return self.ref.layer_ids

    @property
    def raw(self) -> np.ndarray:
        """The stored values, memory-mapped (bf16 as uint16).

        Raises:
            DatasetError: the file is missing or does not hold what the row says.
        """
        try:
            return open_states(self.root, self.ref)
        except HiddenStatesError as exc:
            raise DatasetError(str(exc)) from exc

    @property
    def scales(self) -> np.ndarray | None:
        """fp8: the ``[T, L, 1]`` float32 scales of :attr:`raw`, memory-mapped; None for other dtypes.

        Raises:
            DatasetError: the file is missing or does not hold what the row says.
        """
        try:
            return open_scales(self.root, self.ref)
        except HiddenStatesError as exc:
            raise DatasetError(str(exc)) from exc

    def float32(self, layer: int | None = None) -> np.ndarray:
        """The states as float32 (one layer id's ``[T, H]`` when given): a copy of what is asked only."""
        raw, scales = self.raw, self.scales
        if layer is not None:
            index = self.layer_ids.index(layer)
            raw, scales = raw[:, index], None if scales is None else scales[:, index]
        return to_float32(raw, self.ref.dtype, scales)

    def torch(self) -> Any:
        """A ``torch.Tensor`` ``[T, L, H]`` of the stored dtype over the mapped file (fp8: bf16, a copy)."""
        return _torch_of(self.raw, self.ref.dtype, self.scales)


class HiddenStateRows(Sequence[dict[str, Any]]):
    """A dataset's rows as dicts, ``hidden_states`` a :class:`HiddenStates` (None for a row without).

    With ``lanes`` each ``tokens`` conversation lane is one row (:func:`lane_rows`).
    """

    def __init__(self, root: Path, table: pa.Table, *, lanes: bool = False) -> None:
        self.root = Path(root)
        self.table = table
        self._lanes = lane_rows(self.root, table) if lanes else None

    def __len__(self) -> int:
        return len(self._lanes) if self._lanes is not None else int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        if self._lanes is not None:
            return self._lanes[index]
        row: dict[str, Any] = self.table.slice(index % len(self), 1).to_pylist()[0]
        record = row.get("hidden_states")
        row["hidden_states"] = (HiddenStates(self.root, HiddenStatesRef.from_record(record)) if record
                                else None)
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True)
class LaneStates:
    """A ``tokens`` conversation lane's states: its turns' files in turn order, one ``[T, L, H]`` span.

    Each turn's file holds the positions past what the earlier turns hold, so the files tile the
    final turn's prompt + output[:-1] exactly once; reading joins them (a copy of what is asked).
    """

    root: Path
    refs: tuple[HiddenStatesRef, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """``[T, L, H]`` of the whole lane."""
        first = self.refs[0].shape
        return (sum(ref.shape[0] for ref in self.refs), *first[1:])

    @property
    def layer_ids(self) -> tuple[int, ...]:
        """The layers along axis 1, ascending (vLLM ids)."""
        return self.refs[0].layer_ids

    @property
    def raw(self) -> np.ndarray:
        """The stored values of the whole lane (bf16 as uint16, fp8 as codes), joined from its files."""
        return np.concatenate([HiddenStates(self.root, ref).raw for ref in self.refs])

    @property
    def scales(self) -> np.ndarray | None:
        """fp8: the lane's ``[T, L, 1]`` scales of :attr:`raw`, joined; None for other dtypes."""
        if self.refs[0].dtype != FP8:
            return None
        return np.concatenate([HiddenStates(self.root, ref).scales for ref in self.refs])

    def float32(self, layer: int | None = None) -> np.ndarray:
        """The lane's states as float32 (one layer id's ``[T, H]`` when given)."""
        return np.concatenate([HiddenStates(self.root, ref).float32(layer) for ref in self.refs])

    def torch(self) -> Any:
        """A ``torch.Tensor`` of the stored dtype (fp8: bf16; needs torch)."""
        return _torch_of(self.raw, self.refs[0].dtype, self.scales)


def _torch_of(raw: np.ndarray, dtype: str, scales: np.ndarray | None) -> Any:
    """``raw`` as a tensor of ``dtype`` (no copy), or dequantized to bfloat16 when ``scales`` are given."""
    import torch  # type: ignore[import-not-found,unused-ignore]  # optional: trainers have it

    if scales is not None:  # trainers take bf16: scaled in float32, rounded once
        return torch.from_numpy(to_bfloat16(to_float32(raw, dtype, scales))).view(torch.bfloat16)
    tensor = torch.from_numpy(np.asarray(raw))
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor


def lane_rows(root: Path, table: pa.Table) -> list[dict[str, Any]]:
    """The rows with each ``tokens`` conversation lane as one row: its final turn's ids, every turn's mask.

    The row is the lane's last turn whose earlier turns are all present (``turns`` counts them),
    with ``loss_mask`` 1 on every generated span of the lane and ``hidden_states`` the lane's
    :class:`LaneStates`; the speculators and SpecForge way to train multi-turn data. Other rows
    come as :class:`HiddenStateRows` gives them.

    Raises:
        DatasetError: a lane's turns do not extend one another, or their files do not tile it.
    """
    rows = table.to_pylist()
    lanes: dict[tuple[str, int], list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.get("history_mode") == "tokens" and row.get("conversation_id") is not None:
            lanes.setdefault((row["conversation_id"], row.get("lane") or 0), []).append(row)
        else:
            record = row.get("hidden_states")
            out.append({**row, "hidden_states": HiddenStates(root, HiddenStatesRef.from_record(record))
                        if record else None, "turns": 1})
    for key, turns in lanes.items():
        out.append(_lane(root, key, sorted(turns, key=lambda r: r["turn_index"])))
    return out


def lanes_of(root: Path, files: Sequence[Path], columns: Sequence[str] = ()) -> list[dict[str, Any]]:
    """:func:`lane_rows` of ``files`` (a snapshot of ``root``): ``columns`` and what the join reads.

    Raises:
        DatasetError: a file cannot be read, or a lane does not join (:func:`lane_rows`).
    """
    names = list(dict.fromkeys((*JOIN_COLUMNS, *columns)))
    schema = pa.schema([TRAINING_SCHEMA.field(name) for name in names], metadata=TRAINING_SCHEMA.metadata)
    return lane_rows(root, read_table(files, schema))


def _lane(root: Path, key: tuple[str, int], turns: list[dict[str, Any]]) -> dict[str, Any]:
    chain = [turn for i, turn in enumerate(turns) if turn["turn_index"] == i and
             all(t["turn_index"] == j for j, t in enumerate(turns[:i + 1]))]
    if not chain:
        raise DatasetError(f"conversation {key[0]} lane {key[1]} has no turn 0")
    final = chain[-1]
    ids = final["input_ids"]
    mask = np.zeros(len(ids), np.int8)
    refs: list[HiddenStatesRef] = []
    position = 0
    for turn in chain:
        if ids[:turn["seq_len"]] != turn["input_ids"]:
            raise DatasetError(f"conversation {key[0]} lane {key[1]}: turn {turn['turn_index']} is not a "
                               "prefix of the lane's last turn")
        mask[turn["prompt_len"]:turn["seq_len"]] = 1
        record = turn.get("hidden_states")
        if record:
            ref = HiddenStatesRef.from_record(record)
            if ref.start != position:
                raise DatasetError(f"conversation {key[0]} lane {key[1]}: turn {turn['turn_index']}'s states "
                                   f"start at {ref.start}, the earlier turns hold {position} positions")
            refs.append(ref)
            position = ref.start + ref.shape[0]
    states = LaneStates(root, tuple(refs)) if refs and position == len(ids) - 1 else None
    return {**final, "loss_mask": mask.tolist(), "hidden_states": states, "turns": len(chain)}
