"""Read a compacted topic of status records (``<prefix>.workers``, ``<prefix>.sinks``) to its end.

A stage publishes a status record of itself every few seconds, keyed by its id, and a tombstone
when it stops cleanly (``eaglefeed.core.status``). Every refresh reads the topic from its start to
its end offsets (compaction keeps it to about one record per process) and keeps the newest
record of each key. A record older than ``STALE_INTERVALS`` of its writer's report interval is
stale: the process died, hangs, or cannot reach Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.clients import Reader
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import make_consumer
from eaglefeed.ops.read_to_end import records_to
from eaglefeed.schemas import AvroCodec

log = logging.getLogger(__name__)

READ_SECONDS = 5.0
"""At most this long per refresh: a screen comes even from a broker that answers slowly."""
STALE_INTERVALS = 3.0
"""A report older than this many of its writer's intervals is stale (two lost ones are noise)."""


def age_seconds(report: dict[str, Any], read_at: int) -> float:
    """Seconds from ``report``'s ``updated_at`` to ``read_at`` (both epoch ms; never negative)."""
    return max(0.0, (read_at - int(report["updated_at"])) / 1000)


def is_stale(report: dict[str, Any], read_at: int) -> bool:
    """Whether ``report`` is older than :data:`STALE_INTERVALS` of its ``interval_seconds``."""
    return age_seconds(report, read_at) > STALE_INTERVALS * float(report["interval_seconds"])


def newest_reports(records: Iterable[tuple[bytes | None, bytes | None]],
                   codec: AvroCodec) -> dict[str, dict[str, Any]]:
    """The newest decodable record of each key, in topic order; a tombstone removes its key.

    A record this version cannot decode (a newer writer) leaves the key's earlier one out too:
    an old report would be shown as if it were the newest.
    """
    reports: dict[str, dict[str, Any]] = {}
    for key, value in records:
        name = (key or b"").decode(errors="replace")
        reports.pop(name, None)
        if value is None:
            continue
        try:
            reports[name] = codec.decode(value)
        except SchemaError:
            pass
    return reports


class StatusTopicFeed:
    """Read one status topic from its start at every refresh (no consumer group).

    Args:
        kafka: the broker.
        topic: the topic read.
        codec: decodes its records.
        reader: the consumer to read with (a fresh one in no group when None).
        read_seconds: at most this long per read.
    """

    def __init__(self, *, kafka: KafkaConfig, topic: str, codec: AvroCodec, reader: Reader | None = None,
                 read_seconds: float = READ_SECONDS) -> None:
        self.topic = topic
        self.codec = codec
        self._reader: Reader = reader if reader is not None else make_consumer(
            kafka, None, enable_auto_commit=False)
        self._assigned: list[TopicPartition] = []
        self.read_seconds = read_seconds

    def read(self) -> tuple[bool, dict[str, dict[str, Any]], int]:
        """Whether the topic exists, the newest report of each key, and when it was read (epoch ms)."""
        records: list[tuple[bytes | None, bytes | None]] = []
        exists = bool(self._assigned)
        try:
            if not self._assigned:
                partitions = self._reader.partitions_for_topic(self.topic)
                exists = bool(partitions)
                if not partitions:
                    return False, {}, now_ms()
                self._assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
                self._reader.assign(self._assigned)
            starts = self._reader.beginning_offsets(self._assigned)
            ends = self._reader.end_offsets(self._assigned)
            for tp in self._assigned:
                self._reader.seek(tp, starts[tp])
            records.extend((rec.key, rec.value)
                           for _, rec in records_to(self._reader, ends, seconds=self.read_seconds))
        except KafkaError as exc:
            log.warning("cannot read %s (%r)", self.topic, exc)
        return exists, newest_reports(records, self.codec), now_ms()

    def close(self) -> None:
        """Close the consumer."""
        self._reader.close()


def now_ms() -> int:
    """Milliseconds since the Unix epoch (the clock status records carry)."""
    return int(time.time() * 1000)
