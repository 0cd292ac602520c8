import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.offsets import OffsetTracker

TP = ("prompts", 0)


def test_commits_only_the_contiguous_finished_prefix():
    t = OffsetTracker()
    t.assign([TP])
    epochs = {o: t.start(TP, o) for o in range(10, 15)}
    assert t.committable() == {}
    t.finish(TP, 12, epochs[12])
    t.finish(TP, 11, epochs[11])
    assert t.committable() == {}  # 10 is still in flight
    t.finish(TP, 10, epochs[10])
    assert t.committable() == {TP: 13}
    t.mark_committed({TP: 13})
    assert t.committable() == {}
    assert t.in_flight() == 2


def test_work_from_a_revoked_assignment_is_never_committed():
    t = OffsetTracker()
    t.assign([TP])
    e0 = t.start(TP, 0)
    e1 = t.start(TP, 1)
    t.finish(TP, 0, e0)
    assert t.revoke([TP]) == {TP: 1}
    t.finish(TP, 1, e1)  # finishes after revocation: ignored
    t.assign([TP])  # re-assigned later: fresh epoch
    assert t.committable() == {}
    e2 = t.start(TP, 1)
    assert e2 != e1
    t.finish(TP, 1, e1)  # stale epoch again
    assert t.committable() == {}
    t.finish(TP, 1, e2)
    assert t.committable() == {TP: 2}


def test_unassigned_partition_is_skipped_and_order_is_enforced():
    t = OffsetTracker()
    assert t.start(TP, 0) is None
    t.assign([TP])
    t.start(TP, 5)
    with pytest.raises(ValueError):
        t.start(TP, 5)


@given(n=st.integers(1, 200), seed=st.integers(0, 10_000))
def test_watermark_never_passes_unfinished_work(n, seed):
    t = OffsetTracker()
    t.assign([TP])
    epochs = {o: t.start(TP, o) for o in range(n)}
    order = list(range(n))
    random.Random(seed).shuffle(order)
    done: set[int] = set()
    for o in order:
        t.finish(TP, o, epochs[o])
        done.add(o)
        committed = t.committable().get(TP, 0)
        assert all(x in done for x in range(committed))
        assert committed == n or committed not in done
    assert t.committable() == {TP: n}
