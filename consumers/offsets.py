"""Which input offsets are safe to commit, when work finishes out of order.

Per partition the tracker keeps the offsets it dispatched, in order, and the set of those
that finished. The committable offset is one past the longest finished prefix (the
contiguous watermark), so a commit never covers a record that is still in flight.

Each assignment of a partition gets a new epoch. Work started under an older epoch can
still finish, but it no longer moves that partition's offsets: after a rebalance, results
of revoked work are never committed by this member.

The tracker is shared by the worker's event loop and kafka-python's IO thread (rebalance
callbacks), so every method takes a lock.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

Partition = Hashable


@dataclass
class _PartitionState:
    epoch: int
    pending: deque[int] = field(default_factory=deque)
    finished: set[int] = field(default_factory=set)
    next_offset: int | None = None  # one past the contiguous finished prefix
    committed: int | None = None


class OffsetTracker:
    """Contiguous-watermark offset tracking across out-of-order completion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[Partition, _PartitionState] = {}
        self._epochs = 0

    def assign(self, partitions: list[Partition]) -> None:
        """Start tracking newly assigned partitions under a fresh epoch."""
        with self._lock:
            for tp in partitions:
                if tp not in self._parts:
                    self._epochs += 1
                    self._parts[tp] = _PartitionState(epoch=self._epochs)

    def revoke(self, partitions: list[Partition]) -> dict[Partition, int]:
        """Stop tracking ``partitions``; return their final committable offsets.

        Work still in flight for them is forgotten: its completion will not be committed.
        """
        with self._lock:
            final = {}
            for tp in partitions:
                state = self._parts.pop(tp, None)
                if state is not None and state.next_offset not in (None, state.committed):
                    final[tp] = state.next_offset  # type: ignore[assignment]
            return final

    def start(self, tp: Partition, offset: int) -> int | None:
        """Record that ``offset`` was dispatched; return the epoch to finish it with.

        Returns:
            the partition's epoch, or None when the partition is not assigned (skip it).
        """
        with self._lock:
            state = self._parts.get(tp)
            if state is None:
                return None
            if state.pending and offset <= state.pending[-1]:
                raise ValueError(f"offset {offset} of {tp} dispatched out of order")
            if not state.pending and state.next_offset is None:
                # Where this assignment starts reading is already the group's position.
                state.next_offset = state.committed = offset
            state.pending.append(offset)
            return state.epoch

    def finish(self, tp: Partition, offset: int, epoch: int) -> None:
        """Record that ``offset`` is finished (its results are durable downstream)."""
        with self._lock:
            state = self._parts.get(tp)
            if state is None or state.epoch != epoch:
                return  # revoked meanwhile: this member must not commit it
            state.finished.add(offset)
            pending = state.pending
            while pending and pending[0] in state.finished:
                done = pending.popleft()
                state.finished.discard(done)
                state.next_offset = done + 1

    def committable(self) -> dict[Partition, int]:
        """Offsets (next to read) that advanced since the last :meth:`mark_committed`."""
        with self._lock:
            return {tp: s.next_offset for tp, s in self._parts.items()
                    if s.next_offset is not None and s.next_offset != s.committed}

    def mark_committed(self, offsets: dict[Partition, int]) -> None:
        """Remember that ``offsets`` were committed to Kafka."""
        with self._lock:
            for tp, offset in offsets.items():
                state = self._parts.get(tp)
                if state is not None:
                    state.committed = offset

    def in_flight(self) -> int:
        """Number of dispatched records not yet finished, over all partitions."""
        with self._lock:
            return sum(len(s.pending) for s in self._parts.values())

    def assigned(self) -> list[Partition]:
        """The partitions currently tracked."""
        with self._lock:
            return list(self._parts)
