"""The worker's status record: its servers' limits and loads, published to ``<prefix>.workers``.

``eaglefeed status`` has only Kafka to read, so the worker tells it what ``--concurrency auto``
decided (the limits are otherwise only on its ``/metrics`` and in its log). Every
``STATUS_INTERVAL`` seconds, and within ``CHECK_INTERVAL`` of a limit or a server's health
changing, the event loop encodes a WorkerStatus (``eaglefeed.schemas.worker_status``) and hands
it to a sender thread of its own, with a plain producer of its own: the data path's producers
(the transactional one of ``--exactly-once`` above all) never carry a status record, and a
broker that is slow or gone blocks only that thread. The thread keeps the newest record only (an
older one still waiting is dropped: the topic is compacted to the newest anyway). A failure is
logged once and otherwise ignored. A clean stop publishes a tombstone so ``status`` stops
listing the worker; a failed one leaves its last record, shown as stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from eaglefeed.consumers.generate.inference import AutoConcurrency, ServerPool
from eaglefeed.core.clients import Clients, Producer
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.errors import StopRequestedError
from eaglefeed.core.kafka import ensure_topics
from eaglefeed.schemas.worker_status import (
    WORKERS_TOPIC_CONFIG,
    server_status,
    worker_status,
    worker_tombstone,
    workers_topic,
)

log = logging.getLogger(__name__)

STATUS_INTERVAL = 5.0
"""Seconds between two status records of an unchanged worker."""
CHECK_INTERVAL = 1.0
"""Seconds between two looks for a change (and so at most one record per this long)."""
CLOSE_SECONDS = 5.0
"""At most this long for the tombstone at shutdown: a broker that is gone must not hold the exit."""
PRODUCER_SETTINGS: dict[str, Any] = {
    # One record every few seconds, whose newest copy is all that counts: no idempotence, no
    # waiting for every replica, no batching; short timeouts, so a send to a broker that is down
    # fails within seconds on the sender thread instead of queueing there.
    "acks": 1, "enable_idempotence": False, "linger_ms": 0, "max_block_ms": 5000,
    "request_timeout_ms": 5000, "delivery_timeout_ms": 10000,
}


@contextlib.asynccontextmanager
async def reporting(cfg: WorkerConfig, clients: Clients | None, *, pool: ServerPool,
                    auto: AutoConcurrency | None, prompts_done: Callable[[], int],
                    interval: float = STATUS_INTERVAL) -> AsyncIterator[None]:
    """Publish the worker's status while the body runs; a tombstone after it if it stopped cleanly.

    Args:
        cfg: the worker's settings (its id, group, ``--concurrency`` and the topic prefix).
        clients: where the producer comes from; None: no status records at all.
        pool: the servers reported on.
        auto: their limits and loads (``--concurrency auto``); None: a fixed concurrency.
        prompts_done: the prompts the worker finished so far.
        interval: seconds between two records of an unchanged worker.
    """
    if clients is None:
        yield
        return
    topic = workers_topic(cfg.kafka.topic_prefix)
    sender = StatusSender(topic=topic, new_producer=lambda: clients.producer(**PRODUCER_SETTINGS),
                          ensure_topic=lambda: ensure_topics(cfg.kafka, {topic: 1},
                                                             configs={topic: WORKERS_TOPIC_CONFIG}))
    report = StatusReport(cfg=cfg, pool=pool, auto=auto, prompts_done=prompts_done, sender=sender,
                          interval=interval)
    task = asyncio.get_running_loop().create_task(report.run())
    clean = False
    try:
        yield
        clean = True
    except StopRequestedError:  # stopped while connecting: a clean stop as well
        clean = True
        raise
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.to_thread(sender.close, worker_tombstone(cfg.worker_id) if clean else None)


class StatusReport:
    """Build the worker's status record on the event loop and hand it to the sender when due.

    Args:
        cfg: the worker's settings.
        pool: its servers.
        auto: their limits and loads; None with ``--concurrency N``.
        prompts_done: the prompts finished so far.
        sender: where the encoded records go.
        interval: seconds between two records of an unchanged worker.
    """

    def __init__(self, *, cfg: WorkerConfig, pool: ServerPool, auto: AutoConcurrency | None,
                 prompts_done: Callable[[], int], sender: StatusSender,
                 interval: float = STATUS_INTERVAL) -> None:
        self.cfg, self.pool, self.auto = cfg, pool, auto
        self.prompts_done = prompts_done
        self.sender = sender
        self.interval = interval

    async def run(self) -> None:
        """Offer a record at once, then on every change and every ``interval`` seconds (until cancelled)."""
        last_shape: object = None
        last_at = 0.0
        while True:
            now = time.monotonic()
            shape = self.shape()
            if shape != last_shape or now - last_at >= self.interval:
                self.sender.offer(self.record())
                last_shape, last_at = shape, now
            await asyncio.sleep(min(CHECK_INTERVAL, self.interval))

    def shape(self) -> tuple[tuple[str, bool, int | None], ...]:
        """What a change is: a server's health or limit (loads and counts move all the time)."""
        return tuple((s.url, s.healthy, s.limit) for s in self.pool.servers)

    def record(self) -> tuple[bytes, bytes]:
        """The encoded status record of now, and its key."""
        servers = []
        for server in self.pool.servers:
            load = self.auto.loads.get(server.url) if self.auto is not None else None
            servers.append(server_status(
                url=server.url, healthy=server.healthy, limit=server.limit,
                running=None if load is None else load.running,
                waiting=None if load is None else load.waiting,
                in_flight=server.sequences, rows_done=server.rows_done))
        return worker_status(worker_id=self.cfg.worker_id, group_id=self.cfg.group_id,
                             updated_at=int(time.time() * 1000), interval_seconds=self.interval,
                             concurrency=self.cfg.concurrency, prompts_done=self.prompts_done(),
                             servers=servers)


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
            log.info("worker status: %s not reached within %.0f s at shutdown; not waiting for it",
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
            log.warning("cannot publish the worker status to %s (%r): eaglefeed status will not list this "
                        "worker until it can; generating goes on (said once)", self.topic, exc)
