import random

from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.consumers.generate.offsets import OffsetTracker
from eaglefeed.schemas.done_offsets import MAX_CHARS, decode_done, encode_done

TP = ("prompts", 0)


def started(t, offsets):
    return {o: t.start(TP, o) for o in offsets}


def test_commits_only_the_contiguous_finished_prefix():
    t = OffsetTracker()
    t.assign([TP])
    epochs = started(t, range(10, 15))
    assert t.committable() == {}
    t.finish(TP, 12, epochs[12])
    t.finish(TP, 11, epochs[11])
    (offset, meta), = t.committable().values()
    assert offset == 10 and decode_done(10, meta) == {11, 12}  # 10 is still in flight
    t.finish(TP, 10, epochs[10])
    assert t.committable() == {TP: (13, "")}
    t.mark_committed({TP: (13, "")})
    assert t.committable() == {}
    assert t.lag() == 2  # 13 and 14 are still in flight


def test_work_from_a_revoked_assignment_is_never_committed():
    t = OffsetTracker()
    t.assign([TP])
    e0, e1 = t.start(TP, 0), t.start(TP, 1)
    t.finish(TP, 0, e0)
    assert t.revoke([TP]) == {TP: (1, "")}
    t.finish(TP, 1, e1)  # finishes after revocation: ignored
    t.assign([TP])  # re-assigned later: fresh epoch
    assert t.committable() == {}
    e2 = t.start(TP, 1)
    assert e2 != e1 and not t.is_current(TP, e1)
    t.finish(TP, 1, e1)  # stale epoch again
    assert t.committable() == {}
    t.finish(TP, 1, e2)
    assert t.committable() == {TP: (2, "")}


def test_unassigned_and_redelivered_offsets_are_not_dispatched():
    t = OffsetTracker()
    assert t.start(TP, 0) is None
    t.assign([TP])
    assert t.start(TP, 5) is not None
    assert t.start(TP, 5) is None and t.start(TP, 3) is None
    assert t.lag() == 1


def test_the_next_owner_skips_what_the_metadata_says_is_done():
    first = OffsetTracker()
    first.assign([TP])
    epochs = started(first, range(100, 110))
    for o in (101, 102, 105, 109):
        first.finish(TP, o, epochs[o])
    commit = first.revoke([TP])[TP]
    assert commit[0] == 100
    second = OffsetTracker()
    second.assign([TP])
    assert second.needs_committed() == [TP]
    second.load_committed(TP, *commit)
    assert second.needs_committed() == []
    epochs = {o: second.start(TP, o) for o in range(100, 110)}
    dispatched = [o for o, e in epochs.items() if e is not None]
    assert dispatched == [100, 103, 104, 106, 107, 108]
    assert second.committable() == {}  # the skips are still what is committed
    second.finish(TP, 100, epochs[100])
    (offset, meta), = second.committable().values()
    assert offset == 103 and decode_done(103, meta) == {105, 109}  # carried forward
    for o in dispatched:
        second.finish(TP, o, epochs[o])
    assert second.committable() == {TP: (110, "")}


def test_skips_survive_until_dispatch_and_finish_with_the_right_epoch():
    t = OffsetTracker()
    t.assign([TP])
    t.load_committed(TP, 0, encode_done(0, {2, 3}))
    epochs = {o: t.start(TP, o) for o in range(5)}
    assert epochs[2] is None and epochs[3] is None
    t.finish(TP, 0, epochs[0])
    assert t.committable()[TP] == (1, encode_done(1, {2, 3}))
    t.finish(TP, 1, epochs[1])
    t.finish(TP, 4, epochs[4])
    assert t.committable() == {TP: (5, "")}


def test_preview_counts_extra_offsets_without_recording_them():
    t = OffsetTracker()
    t.assign([TP])
    epochs = started(t, range(3))
    assert t.committable({TP: [0, 1]}) == {TP: (2, "")}
    assert t.committable() == {}  # nothing was recorded
    t.finish(TP, 0, epochs[0])
    assert t.committable({TP: [1, 2]}) == {TP: (3, "")}


def test_lost_partitions_are_forgotten():
    t = OffsetTracker()
    t.assign([TP, ("prompts", 1)])
    e0 = t.start(TP, 0)
    t.revoke([TP])
    t.finish(TP, 0, e0)
    assert t.start(TP, 1) is None and t.committable() == {}
    assert t.start(("prompts", 1), 0) is not None and t.needs_committed() == [("prompts", 1)]


@given(n=st.integers(1, 200), seed=st.integers(0, 10_000))
def test_watermark_never_passes_unfinished_work(n, seed):
    t = OffsetTracker()
    t.assign([TP])
    epochs = started(t, range(n))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    done: set[int] = set()
    for o in order:
        t.finish(TP, o, epochs[o])
        done.add(o)
        committed, meta = t.committable().get(TP, (0, ""))
        assert all(x in done for x in range(committed))
        assert committed == n or committed not in done
        assert decode_done(committed, meta) == {x for x in done if x > committed}
    assert t.committable() == {TP: (n, "")}


@given(watermark=st.integers(0, 2**40), done=st.sets(st.integers(1, 5000), max_size=300))
def test_metadata_round_trips(watermark, done):
    offsets = {watermark + d for d in done}
    text = encode_done(watermark, offsets)
    assert len(text) <= MAX_CHARS
    assert decode_done(watermark, text) == offsets


def test_metadata_that_does_not_fit_keeps_its_lowest_offsets_and_junk_decodes_to_nothing():
    rng = random.Random(1)
    offsets = set(rng.sample(range(1, 2_000_000), 20_000))  # random bits barely compress
    text = encode_done(0, offsets, max_chars=2000)
    kept = decode_done(0, text)
    assert 0 < len(kept) < len(offsets) and len(text) <= 2000
    assert kept == set(sorted(offsets)[:len(kept)])
    for junk in ("ef1:!!!", "other", None):
        assert decode_done(0, junk) == set()
