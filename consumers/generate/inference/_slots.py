"""The request slots: one weighted FIFO semaphore whose total can be resized."""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """A weighted FIFO semaphore whose total can change: a request of ``n`` samples holds ``n`` slots.

    First come, first served, so a request of many samples is never starved by single ones (and
    two of them can never deadlock each holding part of what the other needs); one larger than
    the whole total runs alone. A smaller total takes effect as slots are released.
    ``--concurrency N`` never resizes it; ``--concurrency auto`` sizes it to the sum of the
    servers' limits.

    Args:
        total: the slots to share (at least 1).
    """

    def __init__(self, *, total: int) -> None:
        self.total = max(1, total)
        self.held = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def hold(self, n: int) -> _Hold:
        """An async context manager holding ``n`` slots."""
        return _Hold(slots=self, n=max(n, 1))

    def resize(self, total: int) -> None:
        """Set the total (at least 1) and let in the waiters that now fit."""
        self.total = max(1, total)
        self._wake()

    async def acquire(self, n: int) -> None:
        """Wait until ``n`` slots are free (and every earlier waiter served), then hold them."""
        if not self._waiters and self._fits(n):
            self.held += n
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((n, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(n)  # granted, then cancelled before it ran: give the slots back
            self._wake()
            raise

    def release(self, n: int) -> None:
        """Give back ``n`` slots."""
        self.held -= n
        self._wake()

    def _fits(self, n: int) -> bool:
        return self.held + n <= self.total or self.held == 0

    def _wake(self) -> None:
        while self._waiters:
            n, future = self._waiters[0]
            if future.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self.held += n
            future.set_result(None)


class _Hold:
    def __init__(self, *, slots: Slots, n: int) -> None:
        self.slots, self.n = slots, n

    async def __aenter__(self) -> None:
        await self.slots.acquire(self.n)

    async def __aexit__(self, *_exc: object) -> None:
        self.slots.release(self.n)
