"""Which input offsets are safe to commit, when work finishes out of order.

Per partition the tracker keeps the offsets it dispatched, in order, and the set of those
that finished. The committable offset is one past the longest finished prefix (the
contiguous watermark), so a commit never covers a record that is still in flight. Offsets
finished above the watermark travel in the commit's metadata
(:func:`~eaglefeed.schemas.done_offsets.encode_done`),
and the next owner of the partition skips them instead of generating them again.

Each assignment of a partition gets a new epoch. Work started under an older epoch can
still finish, but it no longer moves that partition's offsets: after a rebalance, results
of revoked work are never committed by this member.

The tracker is shared by the worker's event loop, its Kafka thread and kafka-python's IO
thread (rebalance callbacks), so every method takes a lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field

from eaglefeed.schemas.done_offsets import decode_done, encode_done

Partition = Hashable
Commit = tuple[int, str]
"""An offset to commit (the next one to read) and its metadata."""


@dataclass
class _PartitionState:
    epoch: int
    pending: deque[int] = field(default_factory=deque)  # dispatched, not yet behind the watermark
    finished: set[int] = field(default_factory=set)  # finished members of ``pending``
    skip: set[int] | None = None  # done per the committed metadata; None until loaded
    next_offset: int | None = None  # the watermark: one past the contiguous finished prefix
    highest: int | None = None  # highest offset seen
    committed: Commit | None = None


class OffsetTracker:
    """Contiguous-watermark offset tracking across out-of-order completion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[Partition, _PartitionState] = {}
        self._epochs = 0
        self.changes = 0
        """Counts assignment changes (so callers can tell that a rebalance happened)."""

    def assign(self, partitions: Collection[Partition]) -> None:
        """Start tracking newly assigned partitions, each under a fresh epoch."""
        with self._lock:
            self.changes += 1
            for tp in partitions:
                if tp not in self._parts:
                    self._epochs += 1
                    self._parts[tp] = _PartitionState(epoch=self._epochs)

    def needs_committed(self) -> list[Partition]:
        """Assigned partitions whose committed offset and metadata were not loaded yet."""
        with self._lock:
            return [tp for tp, s in self._parts.items() if s.skip is None]

    def load_committed(self, tp: Partition, offset: int | None, metadata: str | None) -> None:
        """Take the group's committed position of ``tp``; its metadata lists offsets to skip."""
        with self._lock:
            state = self._parts.get(tp)
            if state is None or state.skip is not None:
                return
            state.skip = set()
            if offset is not None and state.next_offset is None:
                state.skip = decode_done(offset, metadata)
                state.next_offset = offset
                state.committed = (offset, metadata or "")

    def revoke(self, partitions: Collection[Partition]) -> dict[Partition, Commit]:
        """Stop tracking ``partitions``; return what is left to commit for them.

        Work still in flight for them is forgotten: its completion will not be committed.
        """
        with self._lock:
            self.changes += 1
            final = {}
            for tp in partitions:
                state = self._parts.pop(tp, None)
                if state is not None:
                    commit = _commit_of(state, ())
                    if commit is not None and commit != state.committed:
                        final[tp] = commit
            return final

    def start(self, tp: Partition, offset: int) -> int | None:
        """Record that ``offset`` was fetched; return the epoch to finish it with.

        Returns:
            the partition's epoch, or None when the record must not be processed: the
            partition is not assigned, the offset was already dispatched (a re-delivery), or
            the committed metadata says it is done.
        """
        with self._lock:
            state = self._parts.get(tp)
            if state is None or (state.highest is not None and offset <= state.highest):
                return None
            if state.next_offset is None:
                # No committed position known: this assignment starts where it first reads.
                state.next_offset = offset
                state.committed = (offset, "")
            state.highest = offset
            state.pending.append(offset)
            if state.skip and offset in state.skip:
                state.skip.discard(offset)
                _finish(state, offset)
                return None
            return state.epoch

    def finish(self, tp: Partition, offset: int, epoch: int) -> None:
        """Record that ``offset`` is finished (its results are durable downstream)."""
        with self._lock:
            state = self._parts.get(tp)
            if state is not None and state.epoch == epoch:
                _finish(state, offset)
            # else: revoked meanwhile, and this member must not commit it

    def is_current(self, tp: Partition, epoch: int) -> bool:
        """Whether ``epoch`` is the live assignment of ``tp``."""
        with self._lock:
            state = self._parts.get(tp)
            return state is not None and state.epoch == epoch

    def committable(self, extra: Mapping[Partition, Collection[int]] | None = None
                    ) -> dict[Partition, Commit]:
        """Commits that changed since the last :meth:`mark_committed`.

        Args:
            extra: offsets to count as finished without recording them (a transaction that
                will publish their results together with this commit).
        """
        extra = extra or {}
        with self._lock:
            out = {}
            for tp, state in self._parts.items():
                commit = _commit_of(state, extra.get(tp, ()))
                if commit is not None and commit != state.committed:
                    out[tp] = commit
            return out

    def mark_committed(self, commits: Mapping[Partition, Commit]) -> None:
        """Remember that ``commits`` reached Kafka."""
        with self._lock:
            for tp, commit in commits.items():
                state = self._parts.get(tp)
                if state is not None:
                    state.committed = commit

    def lag(self) -> int:
        """Records fetched but not yet covered by a commit, over all partitions."""
        with self._lock:
            return sum(s.highest + 1 - (s.committed[0] if s.committed else s.next_offset or 0)
                       for s in self._parts.values() if s.highest is not None)


def _finish(state: _PartitionState, offset: int) -> None:
    state.finished.add(offset)
    pending = state.pending
    while pending and pending[0] in state.finished:
        done = pending.popleft()
        state.finished.discard(done)
        state.next_offset = done + 1


def _commit_of(state: _PartitionState, extra: Collection[int]) -> Commit | None:
    """The commit for ``state`` as if ``extra`` offsets were finished too."""
    if state.next_offset is None:
        return None
    done = state.finished.union(extra) if extra else state.finished
    watermark = state.next_offset
    for offset in state.pending:
        if offset not in done:
            break
        watermark = offset + 1
    above = [o for o in done if o > watermark]
    if state.skip:
        above += [o for o in state.skip if o > watermark]
    return watermark, encode_done(watermark, above)
