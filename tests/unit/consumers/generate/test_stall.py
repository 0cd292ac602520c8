"""The worker's stall guard: a gap between loop turns past the session timeout holds results once."""

import asyncio

from eaglefeed.consumers.generate.rebalance import StallGuard


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_only_a_gap_past_the_session_timeout_holds_results():
    clock = Clock()
    guard = StallGuard(after=6.0, hold=0.01, clock=clock)
    for _ in range(5):  # a busy loop: turns every 2 s
        clock.now += 2.0
        guard.tick()
        assert asyncio.run(guard.settle()) is False
    clock.now += 10.0  # SIGSTOP for 10 s; a result comes in before the loop's next turn
    assert asyncio.run(guard.settle()) is True and guard.stalls == 1
    guard.tick()  # the loop's turn after the stall counts the same stall, not a new one
    assert guard.stalls == 1
