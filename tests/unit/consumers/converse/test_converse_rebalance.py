"""The watch that re-joins a group join kafka-python left unfinished."""

import asyncio

from eaglefeed.consumers.converse.rebalance import REJOIN_SECONDS, Rebalance


def test_a_revocation_without_an_assignment_for_long_is_stuck_once_per_period():
    now = [100.0]
    listener = Rebalance(clock=lambda: now[0])
    assert not listener.stuck()
    asyncio.run(listener.on_partitions_revoked(set()))
    now[0] += REJOIN_SECONDS - 1
    assert not listener.stuck()  # a slow rebalance is given its time
    now[0] += 2
    assert listener.stuck() and not listener.stuck()  # then once per period
    asyncio.run(listener.on_partitions_assigned(set()))  # even an empty assignment ends the wait
    now[0] += 10 * REJOIN_SECONDS
    assert not listener.stuck()
