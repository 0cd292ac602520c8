"""The settle hold: new partitions wait until the assignment stayed unchanged long enough."""

from __future__ import annotations

from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.rebalance import SettleHold

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_new_partitions_are_held_until_the_assignment_stays_unchanged():
    clock = Clock()
    hold = SettleHold(seconds=5, clock=clock)
    hold.assigned({P0, P1, P2})
    clock.now += 3
    assert hold.held() == {P0, P1, P2}
    hold.revoked({P2})  # a second member joined: the change restarts the wait
    clock.now += 4
    assert hold.held() == {P0, P1}
    clock.now += 1
    assert hold.held() == set()
    hold.assigned({P2})  # given back later: only it waits, the kept ones are never held again
    assert hold.held() == {P2}


def test_zero_seconds_never_holds():
    hold = SettleHold(seconds=0, clock=Clock())
    hold.assigned({P0})
    assert hold.held() == set()
