"""A stage's status records, sent on a thread and a plain producer of their own.

``eaglefeed status`` has only Kafka to read, so a stage (the generate workers, the sinks) tells
it what only the stage knows. The data path's producers (the transactional one of
``--exactly-once`` above all) never carry a status record, and a broker that is slow or gone
blocks only the sender's thread. It keeps the newest record only (an older one still waiting is
dropped: the topic is compacted to the newest anyway). A failure is logged once and otherwise
ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from eaglefeed.core.clients import Producer

log = logging.getLogger(__name__)

CLOSE_SECONDS = 5.0
"""At most this long for the tombstone at shutdown: a broker that is gone must not hold the exit."""
PRODUCER_SETTINGS: dict[str, Any] = {
    # One record every few seconds, whose newest copy is all that counts: no idempotence, no
    # waiting for every replica, no batching; short timeouts, so a send to a broker that is down
    # fails within seconds on the sender thread instead of queueing there.
    "acks": 1, "enable_idempotence": False, "linger_ms": 0, "max_block_ms": 5000,
    "request_timeout_ms": 5000, "delivery_timeout_ms": 10000,
}


class StatusSender:
    """A daemon thread that sends the newest record offered to it, with a producer of its own.

    Args:
        topic: where the records go.
        new_producer: builds the producer (on the thread, at the first record).
        ensure_topic: creates the topic when it does not exist (on the thread, before the producer).
    """

    def __init__(self, *, topic: str, new_producer: Callable[[], Producer],
                 ensure_topic: Callable[[], object]) -> None:
        self.topic = topic
        self._new_producer = new_producer
        self._ensure_topic: Callable[[], object] | None = ensure_topic
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: tuple[bytes, bytes | None] | None = None
        self._closing = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="kafka-status", daemon=True)
        self._thread.start()

    def offer(self, item: tuple[bytes, bytes | None]) -> None:
        """Send ``(key, value)`` soon, replacing one offered earlier and not sent yet; never blocks."""
        with self._lock:
            if self._closing:
                return
            self._pending = item
        self._wake.set()

    def close(self, last: tuple[bytes, None] | None, timeout: float = CLOSE_SECONDS) -> None:
        """Send ``last`` (a tombstone; None: nothing more), flush and stop, for up to ``timeout`` seconds."""
        with self._lock:
            self._pending = last if last is not None else self._pending
            self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.info("status: %s not reached within %.0f s at shutdown; not waiting for it",
                     self.topic, timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                item, self._pending = self._pending, None
                self._wake.clear()
                closing = self._closing
            if item is not None:
                self._send(*item)
            if closing:
                break
        if self._producer is not None:
            self._guard(lambda: self._producer.flush(timeout=CLOSE_SECONDS))  # type: ignore[union-attr]
            self._guard(lambda: self._producer.close(timeout=CLOSE_SECONDS))  # type: ignore[union-attr]

    def _send(self, key: bytes, value: bytes | None) -> None:
        def send() -> None:
            if self._ensure_topic is not None:
                self._ensure_topic()
                self._ensure_topic = None
            if self._producer is None:
                self._producer = self._new_producer()
            self._producer.send(self.topic, key=key, value=value).add_errback(self._failed)

        self._guard(send)

    def _guard(self, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a status record is never worth stopping the worker for
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("cannot publish the status to %s (%r): eaglefeed status will not list this "
                        "process until it can; its work goes on (said once)", self.topic, exc)
