"""``--concurrency auto``: one server's in-flight limit, grown while it has room and cut when it queues.

Pure logic, fed by the caller (``eaglefeed.consumers.generate.inference.adaptive``); no clock, no I/O.

With load reports (the server's ``/metrics``: running and waiting requests, read every poll):

- nothing waits beyond a small allowance and the limit was in use: grow it, doubling until the
  first cut (slow start), then by a tenth;
- more waits: cut it by ``(running + allowance) / (running + waiting)``, at most by half. Every
  worker sharing the server sees the same queue and cuts by the same share, so together they
  remove it; while the queue drains (smaller than at the last cut) nothing is cut again.

A growing batch makes every step slower, so latency rising without a queue is the server doing
more at once, not less: with load reports latency does not cut the limit. Without them (SGLang
without ``--enable-metrics``, a gateway) the seconds per output token decide, gradient-like: a
window's median within ``tolerance`` of the floor (the lowest window seen) grows the limit, above
it cuts it by floor × tolerance / median. Slower at a limit no higher than the floor's own means
the server itself slowed (not a queue of ours): the floor is learnt again there. The limit stays
within [minimum, maximum]; :meth:`ServerLimit.reset` (a server out of rotation, or back) starts it
again at ``start``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitSettings:
    """Bounds and gains of :class:`ServerLimit` (in sequences: requests × ``n``)."""

    start: int = 16
    minimum: int = 4
    maximum: int = 1024
    allowance: float = 0.1  # waiting requests taken as normal, a share of running (+ ALLOWANCE_MIN):
    # requests that arrived during the current engine step wait for the next one
    growth: float = 0.1  # after slow start: the share a clear poll adds
    max_cut: float = 0.5  # one cut takes at most this share off
    in_use: float = 0.9  # the limit counts as in use when the peak in flight reached this share of it
    tolerance: float = 1.5  # without load reports: latency per token this × the floor still grows
    window: int = 16  # without load reports: the fewest latency samples one decision takes


ALLOWANCE_MIN = 2.0


@dataclass(frozen=True)
class Load:
    """What a server reports of itself: requests it runs and requests waiting for a slot."""

    running: float
    waiting: float


class ServerLimit:
    """The in-flight limit of one server (see the module doc).

    Args:
        settings: bounds and gains.
    """

    def __init__(self, settings: LimitSettings | None = None) -> None:
        self.settings = settings or LimitSettings()
        self.reports_load = False  # once a load report came, latency no longer decides
        self.reset()

    @property
    def limit(self) -> int:
        """Sequences this server may have in flight now."""
        return int(self._limit)

    def reset(self) -> None:
        """Start again at ``start``, in slow start (a server out of rotation, restarted or new)."""
        s = self.settings
        self._limit = float(min(max(s.start, s.minimum), s.maximum))
        self._slow_start = True
        self._draining: float | None = None  # waiting at the last cut, while the queue drains
        self._peak = 0
        self._samples: list[float] = []
        self._floor: float | None = None
        self._floor_limit = 0  # the limit the floor was measured at

    def note_in_flight(self, sequences: int) -> None:
        """Record what is in flight on the server now (the peak since the last decision counts)."""
        self._peak = max(self._peak, sequences)

    def on_load(self, load: Load) -> None:
        """Decide on one load report of the server."""
        s = self.settings
        self.reports_load = True
        allow = s.allowance * load.running + ALLOWANCE_MIN
        if load.waiting > allow:
            if self._draining is not None and load.waiting < self._draining:
                self._draining = load.waiting  # the last cut is still taking effect
            else:
                share = (load.running + allow) / (load.running + load.waiting)
                self._cut(max(share, 1 - s.max_cut))
                self._draining = load.waiting
        else:
            self._draining = None
            self._grow_if_used()
        self._peak = 0

    def on_latency(self, seconds_per_token: float) -> None:
        """Take one request's latency per output token; decides per window without load reports."""
        if self.reports_load:
            return
        self._samples.append(seconds_per_token)
        s = self.settings
        if len(self._samples) < max(s.window, self.limit // 4):
            return
        median = statistics.median(self._samples)
        self._samples = []
        floor = self._floor
        if floor is None or median < floor:
            self._floor, self._floor_limit = median, self.limit
            self._grow_if_used()
        elif median > s.tolerance * floor and self.limit <= self._floor_limit:
            self._floor = median  # slower at no more in flight: the server slowed, learn it again
        elif median <= s.tolerance * floor:
            self._grow_if_used()
        else:
            self._cut(max(s.tolerance * floor / median, 1 - s.max_cut))
        self._peak = 0

    def _grow_if_used(self) -> None:
        s = self.settings
        if self._peak < s.in_use * self._limit:
            return  # the limit is not what holds the server back: growing it would only add risk
        factor = 2.0 if self._slow_start else 1 + s.growth
        self._limit = min(float(s.maximum), max(self._limit * factor, self._limit + 1))

    def _cut(self, factor: float) -> None:
        self._slow_start = False
        self._limit = max(float(self.settings.minimum), self._limit * factor)


def tolerated(limit: int, settings: LimitSettings | None = None) -> float:
    """Sequences a server with ``limit`` may hold before its queue would cut the limit.

    The queue a limit leaves alone is its allowance; a conversation's turn may go that far over
    its server's limit to find the earlier turns in that server's prefix cache.
    """
    s = settings or LimitSettings()
    return limit * (1 + s.allowance) + ALLOWANCE_MIN


__all__ = ["ALLOWANCE_MIN", "Load", "LimitSettings", "ServerLimit", "tolerated"]
