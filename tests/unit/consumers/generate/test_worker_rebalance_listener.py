"""The worker's rebalance listener calls into the checkpoint and cancels the moved partitions' work."""

import asyncio
import logging

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.checkpoint import GenerateCheckpoint, TransactionalGenerateCheckpoint
from eaglefeed.consumers.generate.offsets import OffsetTracker
from eaglefeed.consumers.generate.publish import Done, TransactionalPublisher
from eaglefeed.consumers.generate.rebalance import Rebalance, SettleHold
from tests.fakes.kafka import FakeKafka

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)


async def inline(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def listen(exactly_once=False):
    fake = FakeKafka()
    fake.create_topic("in", 2)
    for p in range(2):
        fake.append("in", b"x", partition=p)
    consumer = fake.consumer("g", partition_assignment_strategy=(CooperativeStickyAssignor,))
    tracker = OffsetTracker()
    if exactly_once:
        publisher = TransactionalPublisher(new_producer=lambda: fake.producer(transactional_id="tx"))
        checkpoint = TransactionalGenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline,
                                             publisher=publisher)
    else:
        checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline)
    cancelled = []
    fake.subscribe(consumer, ["in"], Rebalance(checkpoint=checkpoint, cancel=cancelled.append))
    consumer.poll()  # assigned: both partitions are tracked
    epoch = tracker.start(TP0, 0)
    checkpoint.finished(Done(TP0, 0, epoch))
    assert tracker.start(TP1, 0) is not None
    return fake, consumer, tracker, cancelled


def test_revoked_partitions_are_cancelled_and_their_watermark_committed():
    fake, consumer, tracker, cancelled = listen()
    fake.rebalance(revoke=[TP0])
    consumer.poll()
    assert cancelled == [{TP0}]
    assert [(c.how, dict(c.offsets)) for c in fake.commits] == [("commit_async", {TP0: (1, "", -1)})]
    assert tracker.start(TP0, 1) is None  # no longer tracked


def test_lost_partitions_are_cancelled_and_nothing_is_committed():
    fake, consumer, tracker, cancelled = listen()
    fake.lose([TP0, TP1])
    consumer.poll()
    assert cancelled == [{TP0, TP1}] and fake.commits == []
    assert tracker.committable() == {}


def test_assigned_partitions_get_a_fresh_epoch():
    fake, consumer, tracker, _ = listen()
    fake.rebalance(revoke=[TP0])
    consumer.poll()
    fake.rebalance(assign=[TP0])
    consumer.poll()
    assert TP0 in tracker.needs_committed() and tracker.start(TP0, 1) is not None


def test_exactly_once_never_commits_on_revocation():
    fake, consumer, _, cancelled = listen(exactly_once=True)
    fake.rebalance(revoke=[TP0])
    consumer.poll()
    assert cancelled == [{TP0}] and fake.commits == []



def test_a_partition_revoked_after_our_membership_expired_is_lost_and_commits_nothing():
    fake, consumer, tracker, cancelled = listen()
    fake.expire_membership("g")  # paused past the session timeout; another member took TP0 meanwhile
    fake.rebalance(revoke=[TP0])  # kafka-python, rejoined under a new member id, says "revoked"
    consumer.poll()
    assert cancelled == [{TP0}] and fake.commits == []  # our stale watermark would move the offset back
    assert tracker.start(TP0, 1) is None
    fake.rebalance(assign=[TP0])  # assigned under the new membership: revoking it commits again
    consumer.poll()
    epoch = tracker.start(TP0, 0)
    tracker.finish(TP0, 0, epoch)
    fake.rebalance(revoke=[TP0])
    consumer.poll()
    assert [list(c.offsets) for c in fake.commits] == [[TP0]]


def test_newly_assigned_partitions_are_paused_until_the_group_settles():
    fake = FakeKafka()
    fake.create_topic("in", 2)
    consumer = fake.consumer("g", partition_assignment_strategy=(CooperativeStickyAssignor,))
    checkpoint = GenerateCheckpoint(tracker=OffsetTracker(), consumer=consumer, on_consumer=inline)
    hold = SettleHold(seconds=60)
    fake.subscribe(consumer, ["in"], Rebalance(checkpoint=checkpoint, cancel=lambda _p: None, hold=hold))
    consumer.poll()
    assert consumer.paused() == {TP0, TP1} == hold.held()  # before their first fetch
    fake.rebalance(revoke=[TP0])
    consumer.poll()
    assert hold.held() == {TP1}


def test_the_watchdogs_rejoin_gives_up_what_the_member_held_before_it_leaves():
    # kafka-python 3.0.12's unsubscribe() calls no listener: without this, a worker that re-joined
    # kept committing watermarks (inside transactions, with --exactly-once) of partitions the group
    # had given to another member.
    fake, consumer, tracker, cancelled = listen(exactly_once=True)
    listener = consumer.listener
    subscribed = []
    listener.rejoin(consumer, lambda: subscribed.append(consumer.assignment()))
    assert cancelled == [{TP0, TP1}]
    assert tracker.committable() == {}  # nothing more is committed for them
    assert tracker.start(TP0, 1) is None and tracker.start(TP1, 1) is None
    assert subscribed == [set()] and fake.commits == []


def test_a_clean_stop_says_in_words_that_it_handed_its_partitions_back_with_everything_committed(caplog):
    """After the final commit nothing is pending: that is the good case, not "committed nothing new"."""
    _fake, consumer, tracker, _ = listen()
    checkpoint = consumer.listener.checkpoint
    asyncio.run(checkpoint.commit())  # the worker's final commit
    checkpoint.closing = True  # then it closes the consumer, which revokes everything it held
    with caplog.at_level(logging.INFO, logger="eaglefeed.consumers.generate.rebalance"):
        asyncio.run(consumer.listener.on_partitions_revoked({TP0, TP1}))
    assert [r.getMessage() for r in caplog.records] == [
        "stopped: handed back 2 partitions (in partitions 0, 1); everything finished was committed"]


def test_a_rebalance_names_the_moved_partitions_and_their_commits_without_reprs(caplog):
    fake, consumer, _, _ = listen()
    with caplog.at_level(logging.INFO, logger="eaglefeed.consumers.generate.rebalance"):
        fake.rebalance(revoke=[TP0])
        consumer.poll()
        fake.rebalance(revoke=[TP1])
        consumer.poll()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "the group moved 1 partition to other members (in partition 0); committed what they finished "
        "(in-0 at offset 1)",
        "the group moved 1 partition to other members (in partition 1); everything finished was already "
        "committed"]
    assert not any("TopicPartition" in line for line in lines)
