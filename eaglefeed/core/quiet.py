"""Keep libraries' lines that mean nothing to an eaglefeed user out of the log.

Installed when the ``eaglefeed`` package is imported (render processes are spawned and import
it too), before ``transformers`` or ``kafka`` log anything. Each filter drops one known message:
    - transformers' "PyTorch was not found": eaglefeed only ever uses tokenizers;
    - kafka-python's "... is blocking the event loop": its IO thread times each step by the
      wall clock, so on a busy machine (or while another thread holds the GIL, e.g. the
      worker's event loop) an idle client reports a "slow task" every few seconds; nothing
      is wrong and nothing a user can act on;
    - kafka-python's "Got error produce response ... retrying ...: NotLeaderForPartitionError":
      the first records sent to a topic just created meet a partition whose leadership has
      not reached every broker's metadata yet (seen even after describe_topics names a
      leader); the idempotent producer retries them in order, nothing is lost or doubled;
    - kafka-python's "Marking the coordinator dead ... NotCoordinatorError": a fresh broker is
      still loading the group's coordinator; the consumer looks it up again by itself;
    - kafka-python's "Metadata refresh: failed Cancelled": a client closed while a metadata
      request was in flight (every clean stop can meet one); nothing was asked of it any more;
    - kafka-python's "<KafkaTCPTransport ... (closed)>: Error receiving network data" (with an
      ``AttributeError: 'NoneType' object has no attribute 'recv'`` traceback): the answer to a
      request still open when its client closed (the sink's fetches wait at the broker for up to
      one poll) reaches a transport whose socket is gone; nothing reads it any more.
Connection errors while a stage starts are quieted by ``eaglefeed.core.connect`` instead.

Others are kept, but at most once per :data:`THROTTLE_SECONDS` each (:data:`THROTTLED`):
    - kafka-python's "Marking the coordinator dead ... Node Disconnected": when the node that
      coordinates a group dies, the other brokers name it as the coordinator until the
      controller fences it (``broker.session.timeout.ms``, 9 s), and kafka-python looks it up,
      finds it unreachable and looks it up again with no pause: a sink logged 3,800 such
      lines in 11 s in the ``leader-kill`` reliability scenario. One a few seconds says as much.
"""

from __future__ import annotations

import logging
import time

DROPPED = {
    "transformers": ("PyTorch was not found",),
    "kafka.net.selector": ("blocking the event loop",),
    "kafka.producer.sender": ("NotLeaderForPartitionError",),
    "kafka.coordinator": ("NotCoordinatorError",),
    "kafka.cluster": ("Metadata refresh: failed Cancelled",),
    "kafka.net.transport": ("(closed)>: Error receiving network data",),
}

THROTTLED = {
    "kafka.coordinator": ("Node Disconnected",),
}
THROTTLE_SECONDS = 5.0


class _Drop(logging.Filter):
    def __init__(self, fragments: tuple[str, ...]) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


class _Throttle(logging.Filter):
    def __init__(self, fragments: tuple[str, ...], seconds: float) -> None:
        super().__init__()
        self.fragments = fragments
        self.seconds = seconds
        self.last: dict[str, float] = {}  # message → when it was last let through

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not any(fragment in message for fragment in self.fragments):
            return True
        now = time.monotonic()
        if now - self.last.get(message, -self.seconds) < self.seconds:
            return False
        if len(self.last) > 1000:  # a bound, should messages vary
            self.last.clear()
        self.last[message] = now
        return True


def install() -> None:
    """Add the filters of :data:`DROPPED` and :data:`THROTTLED` to their loggers (idempotent)."""
    for name, fragments in DROPPED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(fragments))
    for name, fragments in THROTTLED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Throttle) for f in logger.filters):
            logger.addFilter(_Throttle(fragments, THROTTLE_SECONDS))
