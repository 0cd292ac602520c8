"""A decoded batch of GenerationRecords: scalar fields per row, token ids as flat int32 arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eaglefeed.core.errors import SchemaError

TOKEN_FIELDS = ("prompt_ids", "output_ids")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass
class GenerationBatch:
    """Decoded GenerationRecords: scalar fields per row, token ids as flat int32 arrays.

    Attributes:
        rows: every field of each record except ``prompt_ids`` and ``output_ids``.
        prompt_len: number of prompt ids of each row (int32).
        output_len: number of output ids of each row (int32).
        tokens: each row's prompt ids then its output ids, rows back to back (int32).
    """

    rows: list[dict[str, Any]]
    prompt_len: np.ndarray
    output_len: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def offsets(self) -> np.ndarray:
        """Where each row starts in ``tokens`` (length ``len(self) + 1``, int64)."""
        out = np.zeros(len(self.rows) + 1, np.int64)
        np.cumsum(self.prompt_len + self.output_len.astype(np.int64), out=out[1:])
        return out

    def select(self, keep: Sequence[int] | np.ndarray) -> GenerationBatch:
        """The rows at positions ``keep``, in that order."""
        keep = np.asarray(keep, np.int64)
        if len(keep) == len(self.rows) and np.array_equal(keep, np.arange(len(keep))):
            return self  # the common case: every row stays
        offsets = self.offsets
        lengths = offsets[keep + 1] - offsets[keep]
        total = int(lengths.sum())
        starts = np.repeat(offsets[keep] - exclusive_cumsum(lengths), lengths)
        return GenerationBatch(rows=[self.rows[i] for i in keep], prompt_len=self.prompt_len[keep],
                               output_len=self.output_len[keep],
                               tokens=self.tokens[starts + np.arange(total)])

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> GenerationBatch:
        """Build a batch from decoded record dicts (the codec's output).

        Raises:
            ValueError: a token id does not fit in int32.
        """
        rows: list[dict[str, Any]] = []
        plen: list[int] = []
        olen: list[int] = []
        parts: list[np.ndarray] = []
        for rec in records:
            rows.append({k: v for k, v in rec.items() if k not in TOKEN_FIELDS})
            for name, lens in (("prompt_ids", plen), ("output_ids", olen)):
                ids = np.asarray(rec[name], np.int64).reshape(-1)
                if ids.size and (ids.min() < INT32_MIN or ids.max() > INT32_MAX):
                    raise ValueError(f"{name} holds a value outside int32")
                lens.append(ids.size)
                parts.append(ids.astype(np.int32))
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return cls(rows=rows, prompt_len=np.asarray(plen, np.int32), output_len=np.asarray(olen, np.int32),
                   tokens=tokens)

    @classmethod
    def concat(cls, batches: Sequence[GenerationBatch]) -> GenerationBatch:
        """One batch holding the rows of ``batches`` in order."""
        if not batches:
            return cls.empty()
        return cls(rows=[row for b in batches for row in b.rows],
                   prompt_len=np.concatenate([b.prompt_len for b in batches]),
                   output_len=np.concatenate([b.output_len for b in batches]),
                   tokens=np.concatenate([b.tokens for b in batches]))

    @classmethod
    def empty(cls) -> GenerationBatch:
        """A batch without rows."""
        return cls(rows=[], prompt_len=np.zeros(0, np.int32), output_len=np.zeros(0, np.int32),
                   tokens=np.zeros(0, np.int32))


Chunk = tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]  # rows, their positions, failures


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """Where each of ``values`` starts when they are laid end to end."""
    out = np.zeros(len(values), np.int64)
    np.cumsum(values[:-1], out=out[1:])
    return out
