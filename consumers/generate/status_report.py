"""The worker's status record: its servers' limits and loads, published to ``<prefix>.workers``.

``eaglefeed status`` has only Kafka to read, so the worker tells it what ``--concurrency auto``
decided (the limits are otherwise only on its ``/metrics`` and in its log). Every
``STATUS_INTERVAL`` seconds, and within ``CHECK_INTERVAL`` of a limit or a server's health
changing, the event loop encodes a WorkerStatus (``eaglefeed.schemas.worker_status``) and hands
it to a :class:`~eaglefeed.core.status.StatusSender`, a thread with a plain producer of its own,
never in the data path's way. A clean stop publishes a tombstone so ``status`` stops listing the
worker; a failed one leaves its last record, shown as stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from eaglefeed.consumers.generate.inference import AutoConcurrency, ServerPool
from eaglefeed.core.clients import Clients
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.errors import StopRequestedError
from eaglefeed.core.kafka import ensure_topics
from eaglefeed.core.status import PRODUCER_SETTINGS, StatusSender
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
@contextlib.asynccontextmanager
async def reporting(cfg: WorkerConfig, clients: Clients | None, *, pool: ServerPool,
                    auto: AutoConcurrency | None, prompts_done: Callable[[], int],
                    prompts_in_flight: Callable[[], int] = lambda: 0,
                    interval: float = STATUS_INTERVAL) -> AsyncIterator[None]:
    """Publish the worker's status while the body runs; a tombstone after it if it stopped cleanly.

    Args:
        cfg: the worker's settings (its id, group, ``--concurrency`` and the topic prefix).
        clients: where the producer comes from; None: no status records at all.
        pool: the servers reported on.
        auto: their limits and loads (``--concurrency auto``); None: a fixed concurrency.
        prompts_done: the prompts the worker finished so far.
        prompts_in_flight: the prompts it took and has not finished.
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
                          interval=interval, prompts_in_flight=prompts_in_flight)
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
        prompts_in_flight: the prompts taken and not finished.
    """

    def __init__(self, *, cfg: WorkerConfig, pool: ServerPool, auto: AutoConcurrency | None,
                 prompts_done: Callable[[], int], sender: StatusSender,
                 interval: float = STATUS_INTERVAL, prompts_in_flight: Callable[[], int] = lambda: 0) -> None:
        self.cfg, self.pool, self.auto = cfg, pool, auto
        self.prompts_done = prompts_done
        self.prompts_in_flight = prompts_in_flight
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
            if not server.healthy:
                load = None  # its last reading, from before it left rotation: no longer its load
            servers.append(server_status(
                url=server.url, healthy=server.healthy, limit=server.limit,
                running=None if load is None else load.running,
                waiting=None if load is None else load.waiting,
                in_flight=server.sequences, rows_done=server.rows_done))
        return worker_status(worker_id=self.cfg.worker_id, group_id=self.cfg.group_id,
                             updated_at=int(time.time() * 1000), interval_seconds=self.interval,
                             concurrency=self.cfg.concurrency, prompts_done=self.prompts_done(),
                             servers=servers, prompts_in_flight=self.prompts_in_flight())
