"""The fake Kafka's reader: a consumer in no group that assigns itself partitions (``tests.fakes.kafka``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kafka.structs import TopicPartition

from tests.fakes.kafka_consumer import FakeConsumer
from tests.fakes.kafka_state import FakeRecord

if TYPE_CHECKING:
    from tests.fakes.kafka import FakeKafka


class FakeReader(FakeConsumer):
    """Satisfies ``eaglefeed.core.clients.Reader``: ``assign``, ``seek`` and fetch, never a group.

    It joins no group (so it leaves the fake's groups alone) and commits nothing; a partition
    assigned and not sought starts at its beginning (or its end, with ``auto_offset_reset="latest"``).
    """

    def __init__(self, kafka: FakeKafka, settings: dict[str, Any]) -> None:
        super().__init__(kafka, "", settings)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None when it does not exist."""
        with self.kafka.lock:
            count = self.kafka.partitions.get(topic)
        return None if count is None else set(range(count))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` from now on."""
        with self.kafka.lock:
            self._positions = dict.fromkeys(partitions)
            self._paused.clear()
            self.joined = True

    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[FakeRecord]]:
        """Fetch from the assigned partitions (no group, so no join and no listener)."""
        self._check_open()
        batch = self._fetch(max_records or self.max_poll_records)
        self.polls += 1
        if not batch and timeout_ms:
            time.sleep(min(timeout_ms / 1000, self.kafka.idle_poll_seconds))
        return batch

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Stop reading."""
        self.closed = True
        with self.kafka.lock:
            self._positions.clear()

    def _position(self, tp: TopicPartition) -> int:
        position = self._positions[tp]
        if position is None:
            position = 0 if self.earliest else len(self.kafka.logs[tp])
            self._positions[tp] = position
        return position
