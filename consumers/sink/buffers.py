"""The sink's buffer policy: raw messages per partition, and when they must become a segment."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kafka.structs import TopicPartition

from eaglefeed.core.clients import Record
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.metrics import SinkMetrics

Batch = tuple[TopicPartition, list[Record]]
"""A partition and the messages of one segment, in offset order."""


@dataclass
class _Buffer:
    """Raw messages of one partition since its last segment (decoded in bulk when written)."""

    messages: list[Record] = field(default_factory=list)
    nbytes: int = 0
    opened: float = 0.0  # when the oldest message arrived


class Buffers:
    """Buffer the messages of each assigned partition and decide when they become a segment.

    A partition's messages become a segment when it holds ``flush_rows`` of them (segments of
    exactly that many), ``flush_bytes`` bytes, or the oldest is ``flush_seconds`` old; beyond
    ``max_buffer_bytes`` for all partitions together, the largest buffer goes first.

    Args:
        cfg: the flush thresholds.
        metrics: the buffered-records and commit-lag gauges are set here.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, cfg: SinkConfig, metrics: SinkMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cfg = cfg
        self._metrics = metrics
        self._clock = clock
        self._parts: dict[TopicPartition, _Buffer] = {}

    def open(self, tp: TopicPartition) -> None:
        """Start buffering ``tp`` (newly assigned), with nothing buffered."""
        self._parts[tp] = _Buffer()

    def close(self, tp: TopicPartition) -> list[Record]:
        """Stop buffering ``tp`` and return what it held (empty if nothing, or not ours)."""
        buf = self._parts.pop(tp, None)
        return buf.messages if buf is not None else []

    def add(self, tp: TopicPartition, records: Sequence[Record]) -> None:
        """Buffer ``records`` of ``tp``; records of a partition no longer ours are ignored."""
        buf = self._parts.get(tp)
        if buf is None or not records:
            return
        if not buf.messages:
            buf.opened = self._clock()
        buf.messages.extend(records)
        buf.nbytes += _size(records)

    def take_due(self, now: float, *, force: bool = False) -> list[Batch]:
        """Take the messages that must become segments now, one batch per segment, in order.

        Args:
            now: the clock's current time (ages are measured against it).
            force: take everything buffered (the final flush), still in full segments first.
        """
        cfg, due = self._cfg, []
        for tp in list(self._parts):
            while len(self._parts[tp].messages) >= cfg.flush_rows:
                due.append(self._take(tp, cfg.flush_rows))
            buf = self._parts[tp]
            old = now - buf.opened >= cfg.flush_seconds
            if buf.messages and (force or old or buf.nbytes >= cfg.flush_bytes):
                due.append(self._take(tp))
        while sum(b.nbytes for b in self._parts.values()) > cfg.max_buffer_bytes:
            due.append(self._take(max(self._parts, key=lambda t: self._parts[t].nbytes)))
        self._report(now)
        return due

    def buffered(self, tp: TopicPartition) -> int:
        """Messages of ``tp`` waiting (0 if not ours)."""
        buf = self._parts.get(tp)
        return len(buf.messages) if buf is not None else 0

    def total(self) -> int:
        """Messages waiting in every partition's buffer."""
        return sum(len(b.messages) for b in self._parts.values())

    def _take(self, tp: TopicPartition, count: int | None = None) -> Batch:
        """The first ``count`` (default all) messages of ``tp``; the rest keep their age."""
        buf = self._parts[tp]
        end = len(buf.messages) if count is None else count
        taken, rest = buf.messages[:end], buf.messages[end:]
        self._parts[tp] = _Buffer(messages=rest, nbytes=_size(rest), opened=buf.opened)
        return tp, taken

    def _report(self, now: float) -> None:
        waiting = [b.opened for b in self._parts.values() if b.messages]
        self._metrics.buffered_records.set(self.total())
        self._metrics.commit_lag_seconds.set(now - min(waiting) if waiting else 0.0)


def _size(records: Sequence[Record]) -> int:
    return sum(len(r.value or b"") + 64 for r in records)  # 64: per-message overhead
