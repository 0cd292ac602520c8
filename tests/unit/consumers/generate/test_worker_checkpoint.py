"""The worker checkpoint: what is committed, when, and through which call (on the fake Kafka)."""

import asyncio

import pytest
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import CommitFailedError, KafkaError, RebalanceInProgressError
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.checkpoint import GenerateCheckpoint, TransactionalGenerateCheckpoint
from eaglefeed.consumers.generate.offsets import OffsetTracker
from eaglefeed.consumers.generate.publish import Done, TransactionalPublisher
from eaglefeed.core.errors import FatalPublishError
from eaglefeed.schemas.done_offsets import decode_done, encode_done
from tests.fakes.kafka import FakeKafka

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)


async def inline(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def setup(records=4):
    fake = FakeKafka()
    fake.create_topic("in", 2)
    fake.create_topic("out", 1)
    for p in range(2):
        for _ in range(records):
            fake.append("in", b"x", partition=p)
    consumer = fake.consumer("g", partition_assignment_strategy=(CooperativeStickyAssignor,))
    consumer.subscribe(["in"])
    consumer.poll(max_records=0)  # joins; nothing fetched
    tracker = OffsetTracker()
    tracker.assign({TP0, TP1})
    return fake, consumer, tracker


def start(tracker, tp, offsets):
    return {o: Done(tp, o, tracker.start(tp, o)) for o in offsets}


def test_commits_the_watermark_with_the_done_offsets_above_it_once():
    fake, consumer, tracker = setup()
    checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline)
    done = start(tracker, TP0, range(4))
    for o in (0, 2, 3):
        checkpoint.finished(done[o])
    asyncio.run(checkpoint.commit())
    (entry,) = fake.commits
    om = entry.offsets[TP0]
    assert entry.how == "commit" and om.offset == 1 and decode_done(1, om.metadata) == {2, 3}
    asyncio.run(checkpoint.commit())
    assert len(fake.commits) == 1  # nothing new
    checkpoint.finished(done[1])
    asyncio.run(checkpoint.commit())
    assert fake.committed("g", "in", 0) == (4, "", -1)


@pytest.mark.parametrize("error", [CommitFailedError("no"), RebalanceInProgressError()])
def test_a_failed_commit_is_retried_on_the_next_call(error):
    fake, consumer, tracker = setup()
    checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline)
    checkpoint.finished(start(tracker, TP0, [0])[0])
    fake.fail_commits(error)
    asyncio.run(checkpoint.commit())  # logged, not raised
    assert fake.committed("g", "in", 0) is None
    asyncio.run(checkpoint.commit())
    assert fake.committed("g", "in", 0).offset == 1


def test_load_committed_makes_the_tracker_skip_what_the_metadata_lists():
    fake, consumer, tracker = setup()
    fake.set_committed("g", "in", 0, 1, encode_done(1, {2}))
    checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline)
    checkpoint.load_committed()
    assert tracker.needs_committed() == []
    assert tracker.start(TP0, 2) is None and tracker.start(TP0, 3) is not None  # 1 is not read yet
    assert tracker.start(TP1, 0) is not None  # nothing committed: starts where it reads


def test_revoked_partitions_commit_at_once_without_blocking_and_lost_ones_never():
    fake, consumer, tracker = setup()
    checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline)
    done = start(tracker, TP0, range(2))
    start(tracker, TP1, range(2))
    checkpoint.finished(done[0])
    commits = checkpoint.revoke({TP0})
    assert commits == {TP0: (1, "")}
    checkpoint.finished(done[1])  # finished after the revocation: ignored
    assert asyncio.run(checkpoint.commit_revoked(commits)) is True
    assert [(c.how, c.offsets[TP0].offset) for c in fake.commits] == [("commit_async", 1)]
    checkpoint.lose({TP1})
    asyncio.run(checkpoint.commit())
    assert len(fake.commits) == 1 and fake.committed("g", "in", 1) is None
    fake.fail_commits(KafkaError("gone"))
    assert asyncio.run(checkpoint.commit_revoked({TP1: (5, "")})) is False  # logged, never raised


def transactional(records=4, **kw):
    fake, consumer, tracker = setup(records)
    publisher = TransactionalPublisher(new_producer=lambda: fake.producer(transactional_id="tx"))
    outcomes = []
    checkpoint = TransactionalGenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=inline,
                                         publisher=publisher, on_transaction=outcomes.append)
    return fake, tracker, publisher, checkpoint, outcomes


def test_one_transaction_publishes_the_queued_prompts_and_commits_their_offsets():
    fake, tracker, publisher, checkpoint, outcomes = transactional()

    async def go():
        await publisher.start()
        done = start(tracker, TP0, range(3))
        await publisher.publish([("out", b"k0", b"r0")], done[0])
        await publisher.publish([("out", b"k2", b"r2")], done[2])
        await checkpoint.commit()
        await publisher.close()

    asyncio.run(go())
    assert [r.value for r in fake.read("out")] == [b"r0", b"r2"]
    (entry,) = fake.commits
    om = entry.offsets[TP0]
    assert entry.how == "transaction" and om.offset == 1 and decode_done(1, om.metadata) == {2}
    assert outcomes == ["committed"] and tracker.committable() == {}


def test_an_aborted_transaction_is_retried_with_the_same_prompts_and_revoked_ones_are_dropped():
    fake, tracker, publisher, checkpoint, outcomes = transactional()

    async def go():
        await publisher.start()
        done = start(tracker, TP0, [0]) | {10 + o: d for o, d in start(tracker, TP1, [0]).items()}
        await publisher.publish([("out", None, b"a")], done[0])
        await publisher.publish([("out", None, b"b")], done[10])
        fake.fail_transactions(KafkaError("abortable"))
        await checkpoint.commit()
        assert fake.read("out") == [] and fake.commits == []
        checkpoint.revoke({TP1})
        assert await checkpoint.commit_revoked({TP1: (1, "")}) is False  # never outside a transaction
        await checkpoint.commit()

    asyncio.run(go())
    assert outcomes == ["aborted", "committed"]
    assert [r.value for r in fake.read("out")] == [b"a"]  # b's partition was revoked meanwhile
    assert [(c.how, dict(c.offsets)) for c in fake.commits] == [("transaction", {TP0: (1, "", -1)})]


def test_a_fenced_producer_stops_the_worker():
    fake, tracker, publisher, checkpoint, _ = transactional()

    async def go():
        await publisher.start()
        fake.producer(transactional_id="tx").init_transactions()  # a newer instance
        await publisher.publish([("out", None, b"a")], start(tracker, TP0, [0])[0])
        await checkpoint.commit()

    with pytest.raises(FatalPublishError):
        asyncio.run(go())


def test_a_stale_group_generation_aborts_the_transaction():
    fake, tracker, publisher, checkpoint, outcomes = transactional()

    async def go():
        await publisher.start()
        await publisher.publish([("out", None, b"a")], start(tracker, TP0, [0])[0])
        real = checkpoint.consumer.group_metadata
        checkpoint.consumer.group_metadata = lambda: type(real())("g", -1, "old")  # fenced member
        await checkpoint.commit()
        checkpoint.consumer.group_metadata = real
        await checkpoint.commit()

    asyncio.run(go())
    assert outcomes == ["aborted", "committed"] and [r.value for r in fake.read("out")] == [b"a"]



def stuck_transaction(prepared):
    """Two prompts whose transaction's commit never returns; the deadline is short."""
    fake, tracker, publisher, checkpoint, outcomes = transactional()
    publisher.deadline = 0.2
    gate = fake.hang_transactions(prepared=prepared)

    async def go():
        await publisher.start()
        done = start(tracker, TP0, range(2))
        await publisher.publish([("out", b"k0", b"r0")], done[0])
        await publisher.publish([("out", b"k1", b"r1")], done[1])
        # without a deadline this waits for good, as kafka-python's commit_transaction did
        await asyncio.wait_for(checkpoint.commit(), 10)
        await asyncio.wait_for(checkpoint.commit(), 10)  # what the aborted one left, if anything
        await publisher.close()

    try:
        asyncio.run(go())
    finally:
        gate.set()  # lets the abandoned call return (and its thread end)
    return fake, tracker, publisher, outcomes


def test_a_transaction_stuck_before_its_commit_is_given_up_aborted_by_the_next_producer_and_sent_again():
    fake, tracker, publisher, outcomes = stuck_transaction(prepared=False)
    first, second = fake.producers
    assert first.state == "fenced" and publisher.producer is second and publisher.renewals == 1
    assert outcomes == ["in_doubt", "aborted", "committed"]
    assert [r.value for r in fake.read("out")] == [b"r0", b"r1"]  # once each: the stuck copies aborted
    assert len(fake.read("out", committed_only=False)) == 4
    assert fake.committed("g", "in", 0) == (2, "", -1) and tracker.committable() == {}


def test_a_transaction_the_broker_committed_while_its_caller_hung_is_never_sent_again():
    fake, tracker, publisher, outcomes = stuck_transaction(prepared=True)
    assert fake.producers[0].state == "fenced" and publisher.renewals == 1
    assert outcomes == ["in_doubt", "committed"]
    assert [r.value for r in fake.read("out", committed_only=False)] == [b"r0", b"r1"]  # never twice
    assert [c.how for c in fake.commits] == ["transaction"]
    assert fake.committed("g", "in", 0) == (2, "", -1) and tracker.committable() == {}


def test_a_transaction_in_doubt_waits_for_the_group_offsets_and_no_other_starts_meanwhile():
    fake, tracker, publisher, checkpoint, outcomes = transactional()
    publisher.deadline = 0.2
    gate = fake.hang_transactions(prepared=True)

    async def go():
        await publisher.start()
        await publisher.publish([("out", None, b"a")], start(tracker, TP0, [0])[0])
        fake.fail_commits(KafkaError("coordinator away"), count=2)  # two reads of the group's offsets fail
        real = checkpoint.consumer.committed

        def committed(tp, **kw):
            if fake.commit_failures:
                raise fake.commit_failures.popleft()
            return real(tp, **kw)

        checkpoint.consumer.committed = committed
        await asyncio.wait_for(checkpoint.commit(), 10)
        assert outcomes == ["in_doubt"] and publisher.renewals == 1
        await publisher.publish([("out", None, b"b")], start(tracker, TP0, [1])[1])
        await checkpoint.commit()  # still in doubt: b waits
        assert outcomes == ["in_doubt"] and len(fake.read("out", committed_only=False)) == 1
        await checkpoint.commit()  # settles the first one (committed), then commits b
        await publisher.close()

    try:
        asyncio.run(go())
    finally:
        gate.set()
    assert outcomes == ["in_doubt", "committed", "committed"] and publisher.renewals == 1
    assert [r.value for r in fake.read("out", committed_only=False)] == [b"a", b"b"]
    assert fake.committed("g", "in", 0) == (2, "", -1)


def test_a_producer_that_cannot_be_renewed_stops_the_worker(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.publish.RESEND_DELAY", 0)
    fake, tracker, publisher, checkpoint, _ = transactional()
    publisher.deadline = 0.2
    gate = fake.hang_transactions()

    async def go():
        await publisher.start()
        await publisher.publish([("out", None, b"a")], start(tracker, TP0, [0])[0])
        publisher._new_producer = lambda: (_ for _ in ()).throw(KafkaError("no broker"))
        await asyncio.wait_for(checkpoint.commit(), 10)

    try:
        with pytest.raises(FatalPublishError, match="cannot register a new transactional producer"):
            asyncio.run(go())
    finally:
        gate.set()
    assert fake.read("out") == []
