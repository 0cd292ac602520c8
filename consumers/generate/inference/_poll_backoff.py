"""How long ``--concurrency auto`` waits between two ``/metrics`` reads of one server.

Reading a server's ``/metrics`` costs the server CPU: vLLM renders hundreds of histogram lines
per read (8.6 ms of its API server's CPU on the CPU build, docs/BENCHMARKS.md), and on a host where
that API server shares the engine's core, two reads a second take ~1.7 % of the engine. So once a
server's limit holds steady the reads space out: after ``calm_needed`` calm readings in a row the
interval doubles with each further calm one, from ``fast`` up to ``slowest``. Any reading that is
not calm brings it back to ``fast`` at once, and so does :meth:`PollBackoff.disturbed` (a failed
read, a change of health).

A reading is calm when the server reported its load, that load shows no queue beyond twice what
the limit tolerates (``QUEUE_FACTOR`` × the allowance of ``limits``), and the limit after it lies
within ``band`` of the limit at the first reading of the calm streak. Not "the limit did not move
at all": on a saturated server the limit saws by a tenth up and a few per cent down around the
capacity (grow while clear, cut when a few too many wait), reading after reading; a band tells
that wiggle from a real move (slow start, a deep cut, a server that gained or lost capacity),
and a drift of several small steps in one direction leaves the band too.

Reaction time: a server that slows, queues or gains capacity is read again at most ``slowest``
seconds after the last reading (the read's own duration aside), and from the first reading that
shows it every ``fast`` seconds again.
"""

from __future__ import annotations

from eaglefeed.consumers.generate.inference.limits import ALLOWANCE_MIN, LimitSettings, Load

FAST = 0.5
"""Seconds between reads while the limit moves: a few engine steps, so a cut lands before the
queue it answers has grown much further."""
SLOWEST = 4.0
"""The longest wait between two reads of a server that reports its load (the reaction bound)."""
CALM_NEEDED = 3
"""Calm readings in a row before the interval starts to lengthen."""
BAND = 0.2
"""How far (a share of the streak's first limit) the limit may move and the readings still count as calm."""
QUEUE_FACTOR = 2.0
"""A queue beyond this × the limit's allowance is a sign of trouble, whatever the limit did."""


class PollBackoff:
    """The interval between one server's load reads (see the module doc).

    Args:
        fast: seconds between reads while anything moves.
        slowest: the longest interval (the bound on the reaction time).
        calm_needed: calm readings in a row before the interval lengthens.
        band: the share the limit may move within one calm streak.
        settings: the limit's settings (its allowance decides what queue counts as calm).
    """

    def __init__(self, *, fast: float = FAST, slowest: float = SLOWEST, calm_needed: int = CALM_NEEDED,
                 band: float = BAND, settings: LimitSettings | None = None) -> None:
        self.fast = fast
        self.slowest = max(slowest, fast)
        self.calm_needed = calm_needed
        self.band = band
        self.settings = settings or LimitSettings()
        self.interval = fast
        self._streak = 0
        self._reference: int | None = None  # the limit at the first reading of the calm streak

    def reading(self, *, limit: int, load: Load | None) -> float:
        """Take one reading (``limit``: the limit after it decided); returns seconds to the next read."""
        if self._calm(limit, load):
            self._streak += 1
            if self._streak >= self.calm_needed:
                self.interval = min(self.slowest, 2 * self.interval)
        else:
            self._restart(limit)
        return self.interval

    def disturbed(self) -> float:
        """Something changed outside the readings (a failed read, health): back to ``fast``."""
        self._restart(None)
        return self.interval

    def _calm(self, limit: int, load: Load | None) -> bool:
        if load is None or self._reference is None:
            return False
        allow = self.settings.allowance * load.running + ALLOWANCE_MIN
        if load.waiting > QUEUE_FACTOR * allow:
            return False
        return abs(limit - self._reference) <= self.band * self._reference

    def _restart(self, limit: int | None) -> None:
        self.interval = self.fast
        self._streak = 0
        self._reference = limit  # the next calm streak is measured from here (None: from the next reading)


__all__ = ["BAND", "CALM_NEEDED", "FAST", "QUEUE_FACTOR", "SLOWEST", "PollBackoff"]
