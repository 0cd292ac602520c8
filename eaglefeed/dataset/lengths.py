"""Row lengths against a training framework's maximum: exact percentiles and what a cut would cost.

SpecForge cuts each row to ``data.max_length`` (schema default 2048) and speculators to
``--seq-length`` (default 8192); both then drop, without a word, every row left with no loss
token. :class:`LengthCut` applies the same cut to one row so that an export (and ``stats``) can
say exactly which rows and loss tokens it costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The frameworks' default maximum lengths (SpecForge data.max_length, speculators --seq-length).
FRAMEWORK_MAX_LENGTH = {"specforge": 2048, "speculators": 8192}
FRAMEWORK_FLAG = {"specforge": "data.max_length", "speculators": "--seq-length"}
POLICIES = ("drop", "truncate", "error")
PERCENTILES = (50, 90, 99)


class LengthCounts:
    """An exact histogram of lengths (one counter per length), for nearest-rank percentiles."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, np.int64)

    def add(self, lengths: np.ndarray) -> None:
        """Count each length of ``lengths`` (non-negative ints)."""
        if lengths.size == 0:
            return
        binned = np.bincount(lengths.astype(np.int64))
        if binned.size > self.counts.size:
            self.counts = np.concatenate([self.counts, np.zeros(binned.size - self.counts.size, np.int64)])
        self.counts[:binned.size] += binned

    def percentile(self, p: float) -> int:
        """The smallest length L such that at least ``p`` % of the rows are no longer than L (0 if empty)."""
        n = int(self.counts.sum())
        if n == 0:
            return 0
        rank = max(1, int(np.ceil(p / 100 * n)))
        return int(np.searchsorted(np.cumsum(self.counts), rank))

    def summary(self) -> dict[str, int]:
        """``{"p50", "p90", "p99", "max"}``."""
        out = {f"p{p}": self.percentile(p) for p in PERCENTILES}
        out["max"] = self.percentile(100)
        return out


@dataclass
class LengthCut:
    """What cutting rows at ``max_length`` does, under a policy, with exact counts.

    Attributes:
        max_length: the longest row kept whole.
        policy: ``drop`` (rows longer than it are left out), ``truncate`` (cut to it, the mask
            cut alike; a row left with no loss token is left out) or ``error``.
        over: rows longer than ``max_length``.
        dropped_rows: rows left out (too long under ``drop``, no loss token left under ``truncate``).
        dropped_tokens: tokens of the rows left out (all of each row).
        dropped_loss_tokens: loss tokens of the rows left out.
        truncated_rows: rows written shorter than they are.
        cut_tokens: tokens cut from those rows.
        cut_loss_tokens: loss tokens cut from those rows.
    """

    max_length: int
    policy: str
    over: int = 0
    dropped_rows: int = 0
    dropped_tokens: int = 0
    dropped_loss_tokens: int = 0
    truncated_rows: int = 0
    cut_tokens: int = 0
    cut_loss_tokens: int = 0
    first_over: list[str] = field(default_factory=list)

    def apply(self, row_id: str, seq_len: int, prompt_len: int, loss_mask: np.ndarray | None = None) -> int:
        """How many tokens of the row to write: 0 to leave it out, else its new length.

        ``prompt_len`` is where the loss tokens start (the mask is 0…0 1…1). A conversation lane's
        mask has a span per turn: pass it as ``loss_mask`` and the loss tokens are counted on it.
        """
        if seq_len <= self.max_length:
            return seq_len
        self.over += 1
        if len(self.first_over) < 3:
            self.first_over.append(row_id)
        if loss_mask is None:
            loss, kept_loss = seq_len - prompt_len, max(0, self.max_length - prompt_len)
        else:
            mask = np.asarray(loss_mask)
            loss, kept_loss = int(mask[:seq_len].sum()), int(mask[:self.max_length].sum())
        if self.policy == "drop" or kept_loss == 0:
            self.dropped_rows += 1
            self.dropped_tokens += seq_len
            self.dropped_loss_tokens += loss
            return 0
        self.truncated_rows += 1
        self.cut_tokens += seq_len - self.max_length
        self.cut_loss_tokens += loss - kept_loss
        return self.max_length

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"max_length": self.max_length, "policy": self.policy, "over": self.over,
                "dropped_rows": self.dropped_rows, "dropped_tokens": self.dropped_tokens,
                "dropped_loss_tokens": self.dropped_loss_tokens, "truncated_rows": self.truncated_rows,
                "cut_tokens": self.cut_tokens, "cut_loss_tokens": self.cut_loss_tokens}

    def describe(self) -> str:
        """One line for people."""
        return (f"max length {self.max_length} ({self.policy}): {self.over} rows longer; "
                f"{self.dropped_rows} rows dropped ({self.dropped_tokens} tokens, "
                f"{self.dropped_loss_tokens} loss tokens), {self.truncated_rows} rows truncated "
                f"({self.cut_tokens} tokens cut, {self.cut_loss_tokens} of them loss tokens)")


def framework_cut(fmt: str) -> LengthCut:
    """What the framework's own default cut would do (its rows are truncated, then empty ones dropped)."""
    return LengthCut(max_length=FRAMEWORK_MAX_LENGTH[fmt], policy="truncate")
