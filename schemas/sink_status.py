"""SinkStatus records on ``<prefix>.sinks``: what each sink reports of itself.

A sink holds the records it read for up to ``--flush-seconds`` before they become a segment,
and commits their offsets only then: its committed offsets alone say nothing was done for that
long. Its reports say how many it holds. The topic is compacted and keyed by the sink's id, as
``<prefix>.workers`` is (``eaglefeed.schemas.worker_status``): a clean stop writes a tombstone,
a sink that died leaves its last record, which readers ignore once it is stale.
"""

from __future__ import annotations

from eaglefeed.schemas import SINK_STATUS
from eaglefeed.schemas.worker_status import WORKERS_TOPIC_CONFIG

SINKS_SUFFIX = ".sinks"
SINKS_TOPIC_CONFIG = dict(WORKERS_TOPIC_CONFIG)
"""As the workers' topic: only the newest record of each sink matters, and only while it lives."""


def sinks_topic(topic_prefix: str) -> str:
    """The compacted topic of SinkStatus records of the pipeline of ``topic_prefix``."""
    return f"{topic_prefix}{SINKS_SUFFIX}"


def sink_status(*, sink_id: str, group_id: str, updated_at: int, interval_seconds: float, buffered: int,
                flush_seconds: float, rows_written: int) -> tuple[bytes, bytes]:
    """An encoded SinkStatus record and its key (the sink id).

    Args:
        sink_id: the sink's identity (the key, so the newest record per sink is kept).
        group_id: its consumer group.
        updated_at: milliseconds since the Unix epoch.
        interval_seconds: the longest the sink waits between two reports.
        buffered: records read and not yet in a written segment.
        flush_seconds: the longest a buffered record waits for its segment.
        rows_written: rows written since it started.

    Raises:
        SchemaError: a field of the wrong type (a caller's bug).
    """
    value = SINK_STATUS.encode({
        "sink_id": sink_id, "group_id": group_id, "updated_at": updated_at,
        "interval_seconds": interval_seconds, "buffered": buffered, "flush_seconds": flush_seconds,
        "rows_written": rows_written,
    })
    return sink_id.encode(), value


def sink_tombstone(sink_id: str) -> tuple[bytes, None]:
    """The (key, no value) that removes ``sink_id`` from the topic: it stopped cleanly."""
    return sink_id.encode(), None
