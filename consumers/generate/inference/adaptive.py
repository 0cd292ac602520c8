"""``--concurrency auto`` at run time: each server's limit followed, and the request slots sized to their sum.

One task per server reads its load (``_server_load``) and hands it to the server's
:class:`~eaglefeed.consumers.generate.inference.limits.ServerLimit`: every ``poll_interval`` seconds
while the limit moves, less often once it holds steady
(:mod:`~eaglefeed.consumers.generate.inference._poll_backoff`: doubling up to ``slowest_poll``, 4 s,
since each read costs the server CPU), and at once every ``poll_interval`` again when a reading
shows a queue or a moved limit, a read fails or the server's health changes. So a server that slows,
queues or restarts is seen within ``slowest_poll`` seconds (a change of health, which the pool's own
checks find, within ``poll_interval``), and followed at the fast pace from there. Each finished
request hands over its latency per output token. The pool sends a server no more than its limit
(``Server.limit``), and the worker's request slots (``_slots.Slots``, resized here) hold the sum of
the limits of the servers in rotation, so the consumer window (twice the slots) follows it too. A
server that leaves rotation or comes back starts again at the start limit (it may have restarted
with other capacity); one that joins starts there too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

from eaglefeed.consumers.generate.inference._poll_backoff import FAST, SLOWEST, PollBackoff
from eaglefeed.consumers.generate.inference._server_load import read_load
from eaglefeed.consumers.generate.inference._slots import Slots
from eaglefeed.consumers.generate.inference.limits import LimitSettings, Load, ServerLimit
from eaglefeed.consumers.generate.inference.servers import Server, ServerPool
from eaglefeed.core.metrics import WorkerMetrics

log = logging.getLogger(__name__)

POLL_INTERVAL = FAST
"""Seconds between two load readings of a server while its limit moves: a few engine steps, so a
cut lands before the queue it answers has grown much further."""
NO_LOAD_RETRY = 30.0
"""Seconds before a server that reported no load (no ``/metrics``) is asked again."""


class AutoConcurrency:
    """The per-server limits of one worker (see the module doc).

    Args:
        pool: the servers (their ``limit`` is set here).
        http: what reads their ``/metrics``.
        metrics: where each server's limit and load are exported (None: nowhere).
        settings: bounds and gains of every server's limit.
        poll_interval: seconds between load readings of a server while its limit moves.
        slowest_poll: the longest wait between two readings once it holds steady.
        report_seconds: seconds between log lines of the limits (0: none).
        clock: monotonic seconds (tests pass a fake one, with ``sleep``).
        sleep: waits that many seconds.
    """

    def __init__(self, *, pool: ServerPool, http: httpx.AsyncClient, metrics: WorkerMetrics | None = None,
                 settings: LimitSettings | None = None, poll_interval: float = POLL_INTERVAL,
                 slowest_poll: float = SLOWEST, report_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.pool = pool
        self._http = http
        self._metrics = metrics
        self.poll_interval = poll_interval
        self._clock, self._sleep = clock, sleep
        self.limits = {server.url: ServerLimit(settings) for server in pool.servers}
        self.backoffs = {server.url: PollBackoff(fast=poll_interval, slowest=slowest_poll, settings=settings)
                         for server in pool.servers}
        self.loads: dict[str, Load | None] = {server.url: None for server in pool.servers}
        for server in pool.servers:
            server.limit = self.limits[server.url].limit
        self.slots = Slots(total=self.total())
        for server in pool.servers:
            self._apply(server)
            pool.spawn(self._follow(server))
        if report_seconds > 0:
            pool.spawn(self._report(report_seconds))

    def total(self) -> int:
        """The sum of the limits of the servers in rotation (of all of them while none is)."""
        healthy = [s for s in self.pool.servers if s.healthy] or self.pool.servers
        return sum(self.limits[s.url].limit for s in healthy)

    def acquired(self, server: Server) -> None:
        """Note what ``server`` has in flight once a request was counted on it."""
        self.limits[server.url].note_in_flight(server.sequences)

    def finished(self, server: Server, *, seconds: float, tokens: int) -> None:
        """Take the latency of a request that succeeded (``tokens``: output tokens of its samples)."""
        limit = self.limits[server.url]
        before = limit.limit
        limit.on_latency(seconds / max(tokens, 1))
        if limit.limit != before:
            self._apply(server)

    def describe(self) -> str:
        """Each server's limit and last reported load, for the log."""
        parts = []
        for server in self.pool.servers:
            load = self.loads[server.url]
            seen = (f"running {load.running:.0f}, waiting {load.waiting:.0f}, read every "
                    f"{self.backoffs[server.url].interval:g} s" if load else "latency only")
            state = "" if server.healthy else ", out of rotation"
            parts.append(f"{server.url} {self.limits[server.url].limit} ({seen}{state})")
        return "; ".join(parts)

    async def _follow(self, server: Server) -> None:
        """Read ``server``'s load when due and decide; start again when it leaves or rejoins rotation.

        The task wakes every ``poll_interval`` (health is checked then, at no cost to the server);
        it reads ``/metrics`` only once the backoff's interval since the last read has passed.
        """
        limit, backoff = self.limits[server.url], self.backoffs[server.url]
        healthy = server.healthy
        next_read = 0.0
        slack = self.poll_interval / 4  # a tick that lands a hair before the due time still reads
        while True:
            await self._sleep(self.poll_interval)
            if server.healthy != healthy:
                healthy = server.healthy
                limit.reset()
                self._apply(server)
                backoff.disturbed()
                next_read = 0.0  # read at once: it may have restarted with other capacity
            if not server.healthy or self._clock() + slack < next_read:
                continue
            try:
                load = await read_load(self._http, server.url, timeout=max(5.0, 4 * self.poll_interval))
            except httpx.HTTPError:
                backoff.disturbed()  # the next tick reads again
                continue  # its requests say what is wrong; the limit stays until it answers again
            if load is None:
                next_read = self._clock() + NO_LOAD_RETRY  # latency per token decides meanwhile
            else:
                limit.on_load(load)
                next_read = self._clock() + backoff.reading(limit=limit.limit, load=load)
            self.loads[server.url] = load
            self._apply(server)

    async def _report(self, seconds: float) -> None:
        last = ""
        while True:
            await asyncio.sleep(seconds)
            line = self.describe()
            if line != last:
                log.info("concurrency limits: %s", line)
                last = line

    def _apply(self, server: Server) -> None:
        server.limit = self.limits[server.url].limit
        self.pool.limits_changed()
        self.slots.resize(self.total())
        if self._metrics is not None:
            self._metrics.server_limit.labels(server.url).set(server.limit)
            load = self.loads[server.url]
            if load is not None:
                self._metrics.server_running.labels(server.url).set(load.running)
                self._metrics.server_waiting.labels(server.url).set(load.waiting)


__all__ = ["AutoConcurrency"]
