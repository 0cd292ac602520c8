"""The progress line of a consuming stage: what it finished, how fast, what is left, and when it is done.

``generate`` and ``sink`` log one every ``--progress-seconds`` (default 10, 0 for none), e.g.::

    generate: 2,472 prompts done, 41.2/s, lag 3,456 (+512 in flight), ETA 1m37s
    sink: 7,230 records (7,218 rows written, 12 duplicates dropped) done, 120.5/s, lag 0, caught up

The lag is this member's: records of its assigned partitions not read yet (eaglefeed status
shows the whole group's), plus what it holds unfinished; the rate is over the last minute or so.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("eaglefeed.progress")

WINDOW = 6
"""Intervals the rate is measured over (a minute at the default 10 s): steadier than one."""


class ProgressLine:
    """Says how far a stage got every ``seconds``: the loop asks :meth:`due`, then calls :meth:`report`.

    Args:
        stage: the command's name, at the start of the line.
        unit: what ``done`` counts (``prompts``, ``records``).
        seconds: seconds between lines; None or 0 for none.
        pending_word: what the stage holds unfinished (``in flight``, ``buffered``).
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(self, *, stage: str, unit: str, seconds: float | None, pending_word: str = "in flight",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stage = stage
        self.unit = unit
        self.seconds = seconds or 0.0
        self.pending_word = pending_word
        self._clock = clock
        start = clock()
        self._next = start + self.seconds
        self._samples: deque[tuple[float, int]] = deque([(start, 0)], maxlen=WINDOW + 1)

    def due(self, now: float | None = None) -> bool:
        """Whether a line is due (never when switched off)."""
        return self.seconds > 0 and (self._clock() if now is None else now) >= self._next

    def report(self, *, done: int, lag: int | None, pending: int = 0, detail: str = "",
               now: float | None = None) -> str:
        """Log the line (at INFO) and return it.

        Args:
            done: what the stage finished since it started, in ``unit``.
            lag: records not read yet from the assigned partitions, None when not known (no
                partition assigned yet, or the broker did not answer).
            pending: records read but not finished (in flight, buffered).
            detail: a parenthesis after ``done`` (e.g. rows written).
            now: the clock's time (read when None).
        """
        now = self._clock() if now is None else now
        self._next = now + self.seconds
        self._samples.append((now, done))
        rate = self.rate()
        parts = [f"{self.stage}: {done:,} {self.unit}" + (f" ({detail})" if detail else "") + " done",
                 f"{rate:,.1f}/s"]
        if lag is None:
            parts.append("lag unknown")  # not assigned yet, or the broker did not answer in time
        else:
            parts.append(f"lag {lag:,}" + (f" (+{pending:,} {self.pending_word})" if pending else ""))
            parts.append(eta_text(lag + pending, rate))
        line = ", ".join(parts)
        log.info("%s", line)
        return line

    def rate(self) -> float:
        """Units per second over the last :data:`WINDOW` lines (0 before any time passed)."""
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0


def eta_text(left: int, rate: float) -> str:
    """``caught up``, ``ETA 1m35s``, or ``ETA unknown`` when nothing finished lately."""
    if left <= 0:
        return "caught up"
    if rate <= 0:
        return "ETA unknown (nothing finished lately)"
    return "ETA " + duration_text(left / rate)


def duration_text(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``, ``3d04h``: two units at most."""
    total = math.ceil(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
