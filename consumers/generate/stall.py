"""Notice that the worker stood still past its session timeout; hold its results until the group is known.

A worker that was paused (SIGSTOP, a long swap or GC pause) for longer than its group session
timeout wakes up with prompts in flight whose partitions the group has given to another member:
their responses are already waiting in its sockets and would be published at once, before
kafka-python's next heartbeat tells the consumer its membership expired. The other member
generates the same prompts again, so each of them would be published twice (the sink keeps one
row, but the work is paid twice). After such a gap, results wait one heartbeat round trip; then
only those of partitions still ours under the same assignment are published.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

HOLD_SECONDS = 3.0
"""How long results wait after a stall: a heartbeat (every 2 s, ``eaglefeed.core.kafka``) and its answer."""


class StallGuard:
    """Measure the gaps between the worker loop's turns; after one past ``after`` seconds, hold results.

    Args:
        after: the gap that counts as a stall (the group session timeout).
        hold: how long results wait after a stall (default :data:`HOLD_SECONDS`).
        clock: monotonic seconds (it keeps counting while the process is stopped).
    """

    def __init__(self, *, after: float, hold: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.after = after
        self.hold = HOLD_SECONDS if hold is None else hold
        self._clock = clock
        self._last = clock()
        self._hold_until = float("-inf")
        self.stalls = 0

    def tick(self) -> None:
        """One turn of the worker loop."""
        self._check()
        self._last = self._clock()

    async def settle(self) -> bool:
        """Before publishing: after a stall, wait out the hold. True if this result waited."""
        self._check()
        wait = self._hold_until - self._clock()
        if wait <= 0:
            return False
        await asyncio.sleep(wait)
        return True

    def _check(self) -> None:
        now = self._clock()
        gap = now - self._last
        if gap > self.after and now >= self._hold_until:  # a stall not noticed yet
            self.stalls += 1
            self._hold_until = now + self.hold
            self._last = now
            log.warning("the worker stood still for %.1fs (past its %.0fs session timeout): results wait "
                        "%.0fs, then only those of partitions still ours are published", gap, self.after,
                        self.hold)
