"""The stall watchdog: a quiet partition with unread records is recovered in steps, seek → rejoin → exit."""

from __future__ import annotations

import pytest
from kafka.structs import TopicPartition

from eaglefeed.core.errors import StageStalledError
from eaglefeed.core.watchdog import StallWatchdog
from tests.fakes.kafka import FakeKafka

AFTER = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup(records: dict[int, int], *, max_poll_records: int | None = None):
    fake = FakeKafka()
    fake.create_topic("t", len(records))
    for p, count in records.items():
        for _ in range(count):
            fake.append("t", b"v", partition=p)
    consumer = fake.consumer("g", **({"max_poll_records": max_poll_records} if max_poll_records else {}))
    consumer.subscribe(["t"])
    clock, actions, rejoins = Clock(), [], []
    dog = StallWatchdog(stage="sink", after=AFTER, rejoin=lambda: rejoins.append(clock.now),
                        count=actions.append, clock=clock, check_every=0)
    return fake, consumer, clock, dog, actions, rejoins


def turn(consumer, dog, clock, seconds: float):
    clock.now += seconds
    batch = consumer.poll()
    dog.observe(consumer, batch)
    return batch


def test_a_stuck_partition_is_sought_then_rejoined_then_the_stage_exits(caplog):
    fake, consumer, clock, dog, actions, rejoins = setup({0: 3, 1: 3}, max_poll_records=1)
    turn(consumer, dog, clock, 0)  # joins, reads one record
    fake.stall_fetches("g")  # from now on polls return nothing, records waiting
    turn(consumer, dog, clock, AFTER - 1)
    assert actions == []  # not quiet long enough yet
    turn(consumer, dog, clock, 1)
    assert actions == ["seek"]
    assert "t-0 at 1 of 3" in caplog.text and "t-1 at 0 of 3" in caplog.text
    assert consumer.position(TopicPartition("t", 0)) == 1  # sought to where it stood: nothing read twice
    turn(consumer, dog, clock, AFTER - 1)
    assert actions == ["seek"]  # each step waits another ``after`` of silence
    turn(consumer, dog, clock, 1)
    assert actions == ["seek", "rejoin"] and rejoins == [clock.now]
    stalled = "sink stalled: t-0 at 1 of 3, t-1 at 0 of 3 returned no record"
    with pytest.raises(StageStalledError, match=stalled):
        turn(consumer, dog, clock, AFTER)
    assert actions == ["seek", "rejoin", "exit"]


def test_records_again_after_a_step_start_the_steps_over():
    fake, consumer, clock, dog, actions, _ = setup({0: 4}, max_poll_records=1)
    turn(consumer, dog, clock, 0)
    gate = fake.stall_fetches("g")
    turn(consumer, dog, clock, AFTER)
    assert actions == ["seek"]
    gate.set()  # the seek cured it
    assert turn(consumer, dog, clock, 1)
    turn(consumer, dog, clock, 1)
    assert dog.steps == 0
    fake.stall_fetches("g")  # a new stall starts at the first step again
    turn(consumer, dog, clock, AFTER)
    assert actions == ["seek", "seek"]


def test_a_quiet_partition_read_to_its_end_or_paused_by_the_stage_is_not_stuck():
    fake, consumer, clock, dog, actions, _ = setup({0: 2, 1: 0})
    turn(consumer, dog, clock, 0)  # reads everything there is
    for _ in range(5):
        turn(consumer, dog, clock, AFTER)
    assert actions == []
    fake.append("t", b"v", partition=1)
    consumer.pause(*consumer.assignment())  # the stage has no room: it does not ask for records
    for _ in range(5):
        turn(consumer, dog, clock, AFTER)
    assert actions == []


def test_a_member_without_partitions_is_not_stuck():
    fake, consumer, clock, dog, actions, _ = setup({0: 1})
    fake.delay_join("g")  # e.g. more members than partitions: some hold nothing, on purpose
    for _ in range(5):
        turn(consumer, dog, clock, AFTER)
    assert actions == []


def test_without_seconds_the_watchdog_never_acts():
    fake, consumer, clock, _, actions, _ = setup({0: 3}, max_poll_records=1)
    dog = StallWatchdog(stage="sink", after=None, rejoin=lambda: None, count=actions.append, clock=clock)
    turn(consumer, dog, clock, 0)
    fake.stall_fetches("g")
    fake.delay_join("g")
    for _ in range(5):
        turn(consumer, dog, clock, AFTER)
    assert actions == []


def test_a_stage_that_itself_stood_still_is_not_stalled_but_a_stall_after_it_is():
    fake, consumer, clock, dog, actions, _ = setup({0: 3}, max_poll_records=1)
    turn(consumer, dog, clock, 0)
    fake.stall_fetches("g")  # the first polls after the wake-up return nothing, records waiting
    turn(consumer, dog, clock, 1.5 * AFTER)  # SIGSTOPped (or a GC pause) longer than a stall
    assert actions == []  # it asked for nothing meanwhile: no verdict on its partitions
    turn(consumer, dog, clock, AFTER - 1)
    assert actions == []  # quiet is counted from the wake-up ...
    turn(consumer, dog, clock, 1)
    assert actions == ["seek"]  # ... and a stall of its own after it is still recovered


def test_records_that_arrive_after_a_long_idle_are_given_their_time_before_a_seek():
    # A walk-through saw "generate stalled ... seeking" 0.2 s after a produce that followed a
    # minute's idle: a partition at its end had been quiet for 60 s when its records landed.
    fake, consumer, clock, dog, actions, _ = setup({0: 2}, max_poll_records=1)
    dog.check_every = 5
    turn(consumer, dog, clock, 0)
    turn(consumer, dog, clock, 0)
    for _ in range(20):  # read to its end, then idle for 100 s
        turn(consumer, dog, clock, 5)
    gate = fake.stall_fetches("g")  # the next records are not returned at once
    fake.append("t", b"v", partition=0)
    turn(consumer, dog, clock, 5)
    assert actions == []  # they just arrived
    for _ in range(11):
        turn(consumer, dog, clock, 5)
    assert actions == []  # 55 s of silence with records waiting: not yet
    turn(consumer, dog, clock, 5)
    turn(consumer, dog, clock, 5)
    assert actions == ["seek"]  # 60 s: stuck
    gate.set()
