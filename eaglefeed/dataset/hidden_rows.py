"""``eaglefeed.load(DIR, hidden_states=True)``: the rows, each with its states opened lazily (mmap)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.hidden_states import HiddenStatesError, HiddenStatesRef, open_states, to_float32


@dataclass(frozen=True)
class HiddenStates:
    """One row's states: ``[T, L, H]`` for T = prompt + output[:-1], the layers ``layer_ids`` ascending.

    Nothing is read until asked: :attr:`raw` maps the file (the stored values; bf16 as its uint16
    bits), :meth:`float32` widens them, :meth:`torch` gives a tensor of the stored dtype over the
    same memory (no copy).
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

    def float32(self, layer: int | None = None) -> np.ndarray:
        """The states as float32 (one layer id's ``[T, H]`` when given): a copy of what is asked only."""
        raw = self.raw if layer is None else self.raw[:, self.layer_ids.index(layer)]
        return to_float32(raw, self.ref.dtype)

    def torch(self) -> Any:
        """A ``torch.Tensor`` of the stored dtype over the mapped file (needs torch)."""
        import torch  # type: ignore[import-not-found,unused-ignore]  # optional: trainers have it

        raw = self.raw
        tensor = torch.from_numpy(np.asarray(raw))
        return tensor.view(torch.bfloat16) if self.ref.dtype == "bfloat16" else tensor


class HiddenStateRows(Sequence[dict[str, Any]]):
    """A dataset's rows as dicts, ``hidden_states`` a :class:`HiddenStates` (None for a row without)."""

    def __init__(self, root: Path, table: pa.Table) -> None:
        self.root = Path(root)
        self.table = table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        row: dict[str, Any] = self.table.slice(index % len(self), 1).to_pylist()[0]
        record = row.get("hidden_states")
        row["hidden_states"] = (HiddenStates(self.root, HiddenStatesRef.from_record(record)) if record
                                else None)
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))
