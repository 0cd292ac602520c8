"""The in-memory Kafka behaves as the loops' tests assume it does."""

import pytest
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import CommitFailedError, KafkaError, KafkaTimeoutError, ProducerFencedError
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.core.clients import Clients, Consumer, Producer, Reader
from tests.fakes.kafka import FakeKafka

T0, T1, T2 = (TopicPartition("in", p) for p in range(3))


class Recorder(ConsumerRebalanceListener):
    def __init__(self, consumer=None, seek=None):
        self.calls, self.consumer, self.seek = [], consumer, seek or {}

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", revoked, self.consumer.assignment() if self.consumer else None))

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", assigned, None))
        for tp in assigned & set(self.seek):
            self.consumer.seek(tp, self.seek[tp])

    def on_partitions_lost(self, lost):
        self.calls.append(("lost", lost, None))


class AsyncRecorder(AsyncConsumerRebalanceListener):
    def __init__(self, consumer):
        self.calls, self.consumer = [], consumer

    async def on_partitions_revoked(self, revoked):
        await self.consumer.commit_async({tp: OffsetAndMetadata(1, "bye", -1) for tp in revoked})
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", assigned))


def broker(partitions=3, records=3, **kw):
    fake = FakeKafka(**kw)
    fake.create_topic("in", partitions)
    fake.create_topic("out", 2)
    for p in range(partitions):
        for i in range(records):
            fake.append("in", b"v%d-%d" % (p, i), partition=p)
    return fake


def joined(fake, listener_type=Recorder, cooperative=False, **settings):
    if cooperative:
        settings["partition_assignment_strategy"] = (CooperativeStickyAssignor,)
    consumer = fake.consumer("g", **settings)
    listener = listener_type(consumer)
    fake.subscribe(consumer, ["in"], listener)
    return consumer, listener


def test_the_fake_satisfies_the_seam_protocols():
    fake = broker()
    clients: Clients = fake
    consumer: Consumer = fake.consumer("g")
    producer: Producer = fake.producer()
    reader: Reader = fake.reader()
    assert clients and consumer and producer and reader


def test_first_poll_assigns_everything_and_reads_from_the_committed_offset():
    fake = broker()
    fake.set_committed("g", "in", 1, 2)
    consumer, listener = joined(fake)
    batch = consumer.poll(max_records=100)
    assert listener.calls == [("assigned", {T0, T1, T2}, None)]
    assert [r.offset for r in batch[T0]] == [0, 1, 2] and [r.offset for r in batch[T1]] == [2]
    assert batch[T2][0].value == b"v2-0" and consumer.poll() == {}


def test_max_records_pause_resume_and_seek():
    fake = broker()
    consumer, _ = joined(fake, max_poll_records=2)
    assert sum(map(len, consumer.poll().values())) == 2
    consumer.pause(*consumer.assignment())
    assert consumer.paused() == {T0, T1, T2} and consumer.poll() == {}
    consumer.resume(T1)
    consumer.seek(T1, 0)
    assert list(consumer.poll(max_records=10)) == [T1]
    with pytest.raises(ValueError):
        consumer.seek(TopicPartition("out", 0), 0)


def test_cooperative_rebalance_revokes_only_what_moves_and_the_async_listener_commits():
    fake = broker()
    consumer, listener = joined(fake, AsyncRecorder, cooperative=True)
    consumer.poll()
    applied = fake.rebalance(revoke=[T0], assign=[])
    assert not applied.is_set()
    consumer.poll()
    assert applied.is_set() and consumer.assignment() == {T1, T2}
    assert listener.calls == [("assigned", {T0, T1, T2}), ("revoked", {T0})]
    assert fake.committed("g", "in", 0) == OffsetAndMetadata(1, "bye", -1)
    assert fake.commits[-1].how == "commit_async"
    fake.rebalance(assign=[T0])
    assert [r.offset for r in consumer.poll()[T0]] == [1, 2]  # from the committed offset


def test_eager_rebalance_revokes_all_then_seeks_in_the_listener_win():
    fake = broker()
    consumer, listener = joined(fake)
    consumer.poll()
    listener.seek = {T2: 1}
    fake.rebalance(revoke=[T0])
    batch = consumer.poll()
    assert listener.calls[1:] == [("revoked", {T0, T1, T2}, {T0, T1, T2}), ("assigned", {T1, T2}, None)]
    assert [r.offset for r in batch[T2]] == [1, 2] and [r.offset for r in batch[T1]] == [0, 1, 2]


def test_lost_partitions_and_close_revokes():
    fake = broker()
    consumer, listener = joined(fake)
    consumer.poll()
    fake.lose([T1])
    consumer.poll()
    assert listener.calls[-1] == ("lost", {T1}, None) and consumer.assignment() == {T0, T2}
    consumer.close()
    assert listener.calls[-1][:2] == ("revoked", {T0, T2})
    with pytest.raises(KafkaError):
        consumer.poll()


def test_a_failing_listener_surfaces_from_poll():
    fake = broker()
    consumer = fake.consumer("g")

    class Boom(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            raise RuntimeError("boom")

    fake.subscribe(consumer, ["in"], Boom())
    with pytest.raises(KafkaError) as info:
        consumer.poll()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_commit_committed_and_scripted_commit_failures():
    fake = broker()
    consumer, _ = joined(fake)
    consumer.poll()
    consumer.commit({T0: OffsetAndMetadata(2, "meta", -1)})
    assert consumer.committed(T0) == 2 and consumer.committed(T0, metadata=True).metadata == "meta"
    assert consumer.committed(T1) is None
    fake.fail_commits(CommitFailedError("nope"))
    with pytest.raises(CommitFailedError):
        consumer.commit({T0: OffsetAndMetadata(3, "", -1)})
    assert fake.committed("g", "in", 0).offset == 2


def test_sends_settle_at_once_or_on_flush_and_fail_as_scripted():
    fake = broker(acks="flush")
    producer = fake.producer()
    seen = []
    future = producer.send("out", key=b"k", value=b"a").add_callback(seen.append)
    with pytest.raises(KafkaTimeoutError):
        future.get(timeout=0)
    assert fake.read("out") == []
    fake.fail_sends(KafkaTimeoutError("slow"), topic="out")
    failed = producer.send("out", value=b"b").add_errback(seen.append)
    producer.flush()
    assert future.get().offset == 0 and isinstance(seen[1], KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError):
        failed.get()
    assert [r.value for r in fake.read("out")] == [b"a"]
    fake.fail_sends(KafkaError("at once"), at_send=True)
    with pytest.raises(KafkaError):
        producer.send("out", value=b"c")
    with pytest.raises(KafkaTimeoutError):
        producer.send("missing", value=b"c")


def test_transactions_hide_open_and_aborted_records_and_commit_offsets_with_the_records():
    fake = broker()
    consumer, _ = joined(fake)
    consumer.poll()
    reader = fake.consumer("r")
    fake.subscribe(reader, ["out"], None)
    producer = fake.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", value=b"aborted", partition=0)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("out", value=b"kept", partition=0)
    producer.send_offsets_to_transaction({T0: OffsetAndMetadata(3, "", -1)}, consumer.group_metadata())
    assert reader.poll() == {} and fake.committed("g", "in", 0) is None  # open: held back
    producer.commit_transaction()
    assert [r.value for r in reader.poll()[TopicPartition("out", 0)]] == [b"kept"]
    assert fake.committed("g", "in", 0).offset == 3 and fake.commits[-1].how == "transaction"
    assert fake.end_offset("out", 0) == 4  # two records and two markers


def test_stale_group_metadata_failed_commits_and_fencing():
    fake = broker()
    consumer, _ = joined(fake, cooperative=True)
    consumer.poll()
    producer = fake.producer(transactional_id="tx")
    producer.init_transactions()
    stale = consumer.group_metadata()
    fake.rebalance(revoke=[T0])
    consumer.poll()
    producer.begin_transaction()
    with pytest.raises(CommitFailedError):
        producer.send_offsets_to_transaction({T1: OffsetAndMetadata(1, "", -1)}, stale)
    producer.abort_transaction()
    fake.fail_transactions(KafkaError("abortable"))
    producer.begin_transaction()
    producer.send("out", value=b"x", partition=1)
    with pytest.raises(KafkaError):
        producer.commit_transaction()
    producer.abort_transaction()
    assert fake.read("out") == [] and len(fake.read("out", committed_only=False)) == 1
    newer = fake.producer(transactional_id="tx")
    newer.init_transactions()
    with pytest.raises(ProducerFencedError):
        producer.begin_transaction()
