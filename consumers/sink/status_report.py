"""The sink's status record: what it holds for its next segments, published to ``<prefix>.sinks``.

The sink commits a partition's offsets only once its segment is written, up to ``--flush-seconds``
after it read the records: until then its group's committed offsets say it did nothing. So
every ``STATUS_INTERVAL`` seconds, and within ``CHECK_INTERVAL`` of its buffered count changing,
the loop hands a SinkStatus (``eaglefeed.schemas.sink_status``) to a
:class:`~eaglefeed.core.status.StatusSender` (a thread with a plain producer of its own, never in
the data path's way). A clean stop publishes a tombstone; a failed one leaves its last record,
which ``status`` ignores once it is stale.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

from eaglefeed.core.clients import Clients
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.kafka import ensure_topics
from eaglefeed.core.status import PRODUCER_SETTINGS, StatusSender
from eaglefeed.schemas.sink_status import SINKS_TOPIC_CONFIG, sink_status, sink_tombstone, sinks_topic

STATUS_INTERVAL = 5.0
"""Seconds between two status records of a sink whose buffered count did not change."""
CHECK_INTERVAL = 1.0
"""At most one record per this long, however often the count changes."""


class SinkStatusReport:
    """Offer the sink's status to a sender when due; the sink's loop calls :meth:`tick` every turn.

    Args:
        cfg: the sink's settings (its group, ``--flush-seconds``, ``--group-instance-id``).
        sender: where the encoded records go.
        buffered: records read and not yet in a written segment.
        rows_written: rows written so far.
        interval: seconds between two records of an unchanged sink.
    """

    def __init__(self, *, cfg: SinkConfig, sender: StatusSender, buffered: Callable[[], int],
                 rows_written: Callable[[], int], interval: float = STATUS_INTERVAL) -> None:
        self.cfg = cfg
        self.sender = sender
        self.buffered = buffered
        self.rows_written = rows_written
        self.interval = interval
        self.sink_id = cfg.group_instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self._last: tuple[float, int] | None = None  # when the last record was offered, its count

    def tick(self, now: float) -> None:
        """Offer a record if ``interval`` passed, or the count changed and ``CHECK_INTERVAL`` passed."""
        buffered = self.buffered()
        if self._last is not None:
            at, count = self._last
            if now - at < (self.interval if count == buffered else min(CHECK_INTERVAL, self.interval)):
                return
        self._last = (now, buffered)
        self.sender.offer(self.record(buffered))

    def record(self, buffered: int) -> tuple[bytes, bytes]:
        """The encoded status record of now, and its key."""
        return sink_status(sink_id=self.sink_id, group_id=self.cfg.group_id,
                           updated_at=int(time.time() * 1000), interval_seconds=self.interval,
                           buffered=buffered, flush_seconds=self.cfg.flush_seconds,
                           rows_written=self.rows_written())

    def close(self, *, clean: bool) -> None:
        """Stop the sender: a tombstone first after a clean stop (``status`` stops listing the sink)."""
        self.sender.close(sink_tombstone(self.sink_id) if clean else None)


def status_sender(cfg: SinkConfig, clients: Clients) -> StatusSender:
    """A sender to ``<prefix>.sinks``, which it creates (compacted) before its first record."""
    topic = sinks_topic(cfg.kafka.topic_prefix)
    return StatusSender(topic=topic, new_producer=lambda: clients.producer(**PRODUCER_SETTINGS),
                        ensure_topic=lambda: ensure_topics(cfg.kafka, {topic: 1},
                                                           configs={topic: SINKS_TOPIC_CONFIG}))
