"""``eaglefeed.stream``: ranks split the rows, positions resume exactly, compaction moves nothing twice."""

from __future__ import annotations

from itertools import count
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eaglefeed
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.dataset.hidden_states import STORE
from eaglefeed.dataset.streaming import StreamPosition, delete_consumed, measure, shard_of
from eaglefeed.dataset.streaming.position import DIGEST, DigestSet, digest
from eaglefeed.schemas.columnar import GenerationBatch
from tests.unit.dataset.states_support import record


def add_segment(root: Path, ids: range) -> None:
    """A sink flush of rows ``r{i}`` for ``i`` in ``ids``, each with its state file."""
    recs = [record(root, i, dtype="bfloat16")[0] for i in ids]
    entry = shards.write_segment(root, f"seg-{ids.start}.parquet",
                                 shards.batch_to_table(GenerationBatch.from_records(recs)))
    event = {"kind": "flush", "added": [entry], "offsets": {"g:0": [ids.start, ids.stop - 1]}}
    manifest.append_manifest(root, event)


def ids_of(rows) -> list[str]:
    return [row["id"] for row in rows]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    for start in range(0, 40, 10):
        add_segment(root, range(start, start + 10))
    return root


@given(ids=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=60), world=st.integers(1, 8))
def test_the_ranks_of_a_world_split_any_ids_between_them(ids, world):
    ranks = [shard_of(i, world) for i in ids]
    assert all(0 <= r < world for r in ranks)
    assert ranks == [shard_of(i, world) for i in ids]  # a function of the id alone


@settings(max_examples=50)
@given(st.lists(st.binary(min_size=8, max_size=8), max_size=300), st.lists(st.binary(min_size=8, max_size=8),
                                                                            max_size=50))
def test_a_digest_set_holds_what_was_added_and_nothing_else(added, others):
    held = DigestSet(added[:len(added) // 2])
    for item in added[len(added) // 2:]:
        held.add(item)
    assert len(held) == len(set(added))
    assert all(item in held for item in added)
    assert all((item in held) == (item in set(added)) for item in others)
    again = DigestSet.from_bytes(held.to_bytes())
    probe = list(added) + list(others)
    if probe:
        assert list(again.contains(np.array(probe, DIGEST))) == [p in set(added) for p in probe]


GROUPS = count()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared") / "ds"
    for start in range(0, 30, 6):
        add_segment(root, range(start, start + 6))
    return root


@settings(max_examples=25, deadline=None)
@given(world=st.integers(1, 4), stops=st.lists(st.integers(0, 12), min_size=4, max_size=4))
def test_ranks_killed_anywhere_and_resumed_from_their_checkpoints_get_every_row_once(shared, world, stops):
    group = f"prop{next(GROUPS)}"
    received: list[str] = []
    for rank in range(world):
        first = eaglefeed.stream(shared, group=group, rank=rank, world_size=world)
        rows = iter(first)
        taken = [row["id"] for _, row in zip(range(stops[rank]), rows, strict=False)]
        checkpoint = first.state_dict()
        next(rows, None)  # one more row delivered after the checkpoint, then killed
        rest = ids_of(eaglefeed.stream(shared, group=group, rank=rank, world_size=world, state=checkpoint))
        if checkpoint["epoch"] == 1:  # it had read its whole share: the resumed stream is the next epoch
            assert sorted(rest) == sorted(taken)
            rest = []
        received += taken + rest
    assert sorted(received) == sorted(f"r{i}" for i in range(30))


def test_a_position_round_trips_and_refuses_another_rank():
    pos = StreamPosition(group="g", rank=1, world_size=3, epoch=2)
    pos.deliver("r1")
    back = StreamPosition.from_state(pos.to_state())
    assert (back.group, back.rank, back.world_size, back.epoch) == ("g", 1, 3, 2)
    assert digest("r1") in back.delivered and not back.wants("r1")
    with pytest.raises(ValueError):
        StreamPosition(group="g", rank=3, world_size=3)
    with pytest.raises(ValueError):
        StreamPosition(group="../x", rank=0, world_size=1)


def test_two_ranks_receive_every_row_once_and_a_second_group_all_again(dataset):
    a = ids_of(eaglefeed.stream(dataset, group="g", rank=0, world_size=2))
    b = ids_of(eaglefeed.stream(dataset, group="g", rank=1, world_size=2))
    assert not set(a) & set(b) and sorted(a + b) == sorted(f"r{i}" for i in range(40))
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    assert sorted(ids_of(eaglefeed.stream(dataset, group="h"))) == sorted(a + b)


def test_a_rank_resumed_from_its_checkpoint_misses_none_and_repeats_none_across_a_compaction(dataset):
    first = eaglefeed.stream(dataset, group="g", rank=1, world_size=2)
    rows = iter(first)
    before = [next(rows)["id"] for _ in range(7)]
    checkpoint = first.state_dict()
    after_checkpoint = [next(rows)["id"] for _ in range(3)]  # trained on, then the rank is killed
    del rows, first
    compact(dataset, CompactOptions(target_bytes=1, include_partial=True))  # rows move into shards
    add_segment(dataset, range(40, 50))
    resumed = eaglefeed.stream(dataset, group="g", rank=1, world_size=2, state=checkpoint)
    rest = ids_of(resumed)
    mine = {f"r{i}" for i in range(50) if shard_of(f"r{i}", 2) == 1}
    assert not set(before) & set(rest) and sorted(before + rest) == sorted(mine)
    assert set(after_checkpoint) <= set(rest)  # the restored model never saw them
    assert sorted(ids_of(resumed)) == sorted(mine)  # the next epoch: all of them again


def test_follow_delivers_rows_that_become_durable_while_it_reads(dataset):
    stream = eaglefeed.stream(dataset, group="g", follow=True, idle_seconds=0.5, poll_seconds=0.05)
    got = []
    for row in stream:
        got.append(row["id"])
        if len(got) == 40:
            add_segment(dataset, range(40, 45))
    assert sorted(got) == sorted(f"r{i}" for i in range(45))


def test_states_count_as_consumed_once_every_group_committed_and_only_then_are_deleted(dataset):
    stored = measure(dataset)
    assert stored.stored_files == 40 and stored.consumed_bytes == 0 and stored.groups == ()
    g = eaglefeed.stream(dataset, group="g")
    h = eaglefeed.stream(dataset, group="h", delete_states=True)
    rows = list(g)
    assert measure(dataset).consumed_bytes == 0  # delivered, but no position taken yet
    g.state_dict()
    assert measure(dataset).consumed_bytes == 0  # h has not consumed them
    assert delete_consumed(dataset) == (0, 0)
    taken = iter(h)
    opened = [next(taken)["hidden_states"].float32() for _ in range(5)]
    h.state_dict()  # keep-tokens: the five rows both groups consumed lose their states
    usage = measure(dataset)
    assert usage.stored_files == 35 and usage.consumed_bytes == 0 and usage.groups == ("g", "h")
    assert len(opened) == 5 and eaglefeed.load(dataset).num_rows == 40  # the token rows stay
    assert len(rows) == 40 and len(list((dataset / STORE).iterdir())) == 35
