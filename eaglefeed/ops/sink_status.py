"""Read ``<prefix>.sinks`` for ``eaglefeed status``: the records each sink holds for its next segments.

A sink commits offsets only once a segment is written (``--flush-seconds`` after it read the
records, at most): what it holds until then counts as its progress. Each sink publishes a
SinkStatus record of itself (``eaglefeed.consumers.sink.status_report``), read as every status
topic is (``eaglefeed.ops.status_topic``); a stale one (the sink died or hangs) counts for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglefeed.core.clients import Reader
from eaglefeed.core.config import KafkaConfig
from eaglefeed.ops.status_topic import READ_SECONDS, StatusTopicFeed, is_stale
from eaglefeed.schemas import SINK_STATUS
from eaglefeed.schemas.sink_status import sinks_topic


@dataclass(frozen=True)
class SinksView:
    """The newest report of every sink that has not stopped cleanly, as read at ``read_at`` (epoch ms)."""

    topic: str
    reports: dict[str, dict[str, Any]]
    read_at: int

    def fresh(self) -> list[dict[str, Any]]:
        """The reports that are not stale, by sink id."""
        return [r for _, r in sorted(self.reports.items()) if not is_stale(r, self.read_at)]

    def buffered(self) -> int:
        """Records the live sinks read and have not written yet."""
        return sum(int(r["buffered"]) for r in self.fresh())

    def flush_seconds(self) -> float | None:
        """The longest ``--flush-seconds`` of the live sinks (None without any)."""
        return max((float(r["flush_seconds"]) for r in self.fresh()), default=None)


class SinksFeed:
    """Read the sinks topic from its start at every refresh (no consumer group).

    Args:
        kafka: the broker and topic prefix.
        reader: the consumer to read with (a fresh one in no group when None).
        read_seconds: at most this long per read.
    """

    def __init__(self, *, kafka: KafkaConfig, reader: Reader | None = None,
                 read_seconds: float = READ_SECONDS) -> None:
        self._feed = StatusTopicFeed(kafka=kafka, topic=sinks_topic(kafka.topic_prefix), codec=SINK_STATUS,
                                     reader=reader, read_seconds=read_seconds)

    def read(self) -> SinksView:
        """The newest report of each sink (none while the topic does not exist)."""
        _exists, reports, read_at = self._feed.read()
        return SinksView(topic=self._feed.topic, reports=reports, read_at=read_at)

    def close(self) -> None:
        """Close the consumer."""
        self._feed.close()
