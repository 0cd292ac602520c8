"""The worker's publishers: when a prompt counts as durable, and what the transactional one queues."""

import asyncio

from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.publish import AckedPublisher, Done, TransactionalPublisher
from tests.fakes.kafka import FakeKafka

DONE = Done(TopicPartition("in", 0), 7, 1)


def broker(**kw):
    fake = FakeKafka(**kw)
    fake.create_topic("out", 2)
    return fake


def test_a_prompt_is_durable_only_once_every_record_is_acknowledged():
    fake = broker(acks="flush")
    durable = []
    publisher = AckedPublisher(producer=fake.producer(), on_durable=durable.append)

    async def go():
        task = asyncio.create_task(publisher.publish([("out", b"a", b"1"), ("out", b"b", b"2")], DONE))
        await asyncio.sleep(0.05)
        assert not task.done() and durable == []  # sent, not acknowledged
        await asyncio.to_thread(fake.producers[0].flush)  # the acks arrive on another thread
        await asyncio.wait_for(task, 5)
        await publisher.close()

    asyncio.run(go())
    assert durable == [DONE]
    assert sorted(r.value for r in fake.read("out")) == [b"1", b"2"]


def test_failed_sends_are_sent_again_until_the_broker_has_them(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.publish.RESEND_DELAY", 0.001)
    fake = broker()
    fake.fail_sends(KafkaTimeoutError("no ack"), count=2)
    fake.fail_sends(KafkaError("no metadata"), at_send=True)
    durable = []
    publisher = AckedPublisher(producer=fake.producer(), on_durable=durable.append)
    asyncio.run(publisher.publish([("out", b"a", b"1"), ("out", b"b", b"2")], DONE))
    assert durable == [DONE]
    assert sorted(r.value for r in fake.read("out")) == [b"1", b"2"]  # each once
    assert not fake.send_failures


def test_the_transactional_publisher_queues_in_order_and_puts_aborted_batches_first():
    fake = broker()
    publisher = TransactionalPublisher(new_producer=lambda: fake.producer(transactional_id="tx"))
    other = Done(TopicPartition("in", 1), 3, 2)

    async def go():
        await publisher.start()
        await publisher.publish([("out", None, b"1")], DONE)
        first = publisher.take()
        assert publisher.take() == []
        await publisher.publish([("out", None, b"2")], other)
        publisher.put_back(first)
        batch = publisher.take()
        assert [p.done for p in batch] == [DONE, other]

        await publisher.transact(batch, {}, None)
        await publisher.close()

    asyncio.run(go())
    assert [r.value for r in fake.read("out")] == [b"1", b"2"]
    assert fake.producers[0].closed
