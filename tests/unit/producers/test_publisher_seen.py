"""The producer's in-run duplicate set is bounded (a ``--follow`` run never ends)."""

import time

from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.producers.publisher import RecentIds


def test_recent_ids_forget_the_oldest_beyond_the_limit():
    ids = RecentIds(3)
    for pid in (1, 2, 3, 4):
        ids.add(pid)
    assert len(ids) == 3 and 1 not in ids and all(p in ids for p in (2, 3, 4))
    ids.add(2)  # known already: nothing forgotten
    assert len(ids) == 3 and 3 in ids


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 10))
def test_recent_ids_hold_exactly_the_last_distinct_ids(pids, limit):
    ids = RecentIds(limit)
    for pid in pids:
        ids.add(pid)
    last: list[int] = []
    for pid in pids:  # the model: distinct ids in order of first insertion, oldest dropped
        if pid not in last:
            last.append(pid)
            last = last[-limit:]
    assert len(ids) == len(last) and all(p in ids for p in last)


def test_a_full_set_adds_in_constant_time():
    """Once full, every add forgets the oldest id: that must not cost more than the adds before.

    (An ordered dict whose first key is deleted each time made each add walk the deleted slots
    piled up at its front: about 30x slower per add once full, at this size.)
    """
    limit = 50_000
    ids = RecentIds(limit)
    started = time.perf_counter()
    for pid in range(limit):
        ids.add(pid)
    filling = time.perf_counter() - started
    started = time.perf_counter()
    for pid in range(limit, 2 * limit):
        ids.add(pid)
    full = time.perf_counter() - started
    assert len(ids) == limit and 0 not in ids and 2 * limit - 1 in ids
    assert full < 8 * filling + 0.05, (full, filling)
