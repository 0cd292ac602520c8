"""The durable-generations index: a prompt published again is finished without a request."""

import logging

from hypothesis import given
from hypothesis import strategies as st
from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from eaglefeed.consumers.generate.durable import DurableIds, load_durable_ids
from tests.factories import prompt
from tests.fakes.kafka import FakeKafka, FakeReader
from tests.running import wait_until
from tests.unit.consumers.generate.loop_support import (
    GENERATIONS,
    KAFKA,
    PROMPTS,
    Server,
    WorkerRun,
    generated_ids,
    kafka_with_prompts,
)

PID = "ab" * 16


def test_a_prompt_is_covered_only_when_every_sample_is_durable():
    ids = DurableIds(limit=10)
    ids.add(f"{PID}:0".encode())
    assert not ids.covers({"prompt_id": PID, "num_samples": 2})
    ids.add(f"{PID}:1")
    assert ids.covers({"prompt_id": PID, "num_samples": 2})
    assert not ids.covers({"prompt_id": "cd" * 16, "num_samples": 1})
    ids.add(b"not-a-record-id")  # no sample index: ignored
    assert len(ids) == 1


def test_the_samples_not_durable_yet_are_missing():
    ids = DurableIds(limit=10)
    ids.add(f"{PID}:0")
    ids.add(f"{PID}:2")
    assert ids.missing({"prompt_id": PID, "num_samples": 1}) == []
    assert ids.missing({"prompt_id": PID, "num_samples": 4}) == [1, 3]
    assert ids.missing({"prompt_id": "cd" * 16, "num_samples": 2}) == [0, 1]
    assert DurableIds(limit=0).missing({"prompt_id": PID, "num_samples": 2}) == [0, 1]


def test_a_limit_of_zero_never_skips():
    ids = DurableIds(limit=0)
    ids.add(f"{PID}:0")
    assert not ids.covers({"prompt_id": PID, "num_samples": 1})


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 20))
def test_memory_is_bounded_and_the_newest_prompts_are_kept(prompts, limit):
    ids = DurableIds(limit=limit)
    for n in prompts:
        ids.add(f"{n:032x}:0")
    assert len(ids) <= limit
    if prompts:
        assert ids.covers({"prompt_id": f"{prompts[-1]:032x}", "num_samples": 1})


def test_the_worker_does_not_generate_a_prompt_published_again(caplog):
    fake = kafka_with_prompts(0, partitions=1)
    for pid in ("a1", "b2"):
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    server = Server()
    caplog.set_level(logging.INFO, logger="eaglefeed.progress")
    run = WorkerRun(fake, server, exit_when_idle=0.5, progress_seconds=0.05)
    wait_until(lambda: len(generated_ids(fake)) == 2, what="the first generations")
    for pid in ("a1", "b2", "c3"):  # a restarted producer published a1 and b2 again
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    wait_until(lambda: any("5 prompts (2 of them skipped: durable already) done" in r.getMessage()
                           for r in caplog.records), what="a progress line telling the skipped ones apart")
    assert run.join() == 5
    assert sorted(server.requests) == ["a1", "b2", "c3"]
    assert sorted(generated_ids(fake)) == ["a1:0", "b2:0", "c3:0"]
    assert fake.committed(KAFKA.default_group("generate"), PROMPTS, 0).offset == 5


def test_a_prompt_published_again_while_in_flight_waits_for_it_and_costs_no_generation():
    fake = kafka_with_prompts(0, partitions=1)
    server = Server()
    server.hold("a1")
    for pid in ("a1", "a1", "b2"):
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    run = WorkerRun(fake, server, exit_when_idle=0.3)
    wait_until(lambda: len(server.waiting) == 1 and "b2" in server.requests,
               what="the first a1 held, b2 sent")
    assert server.requests.count("a1") == 1  # the copy waits for the first one's outcome
    server.release()
    assert run.join() == 3 and sorted(server.requests) == ["a1", "b2"]
    assert sorted(generated_ids(fake)) == ["a1:0", "b2:0"]
    assert fake.committed(KAFKA.default_group("generate"), PROMPTS, 0).offset == 3


def test_a_copy_of_a_prompt_that_failed_is_generated():
    fake = kafka_with_prompts(0, partitions=1)
    server = Server()
    server.fail = {"a1": 1}  # the first request of a1 is refused (a dead letter), the second answered
    for _ in range(2):
        fake.append(PROMPTS, prompt("a1"), key=b"a1", partition=0)
    run = WorkerRun(fake, server, exit_when_idle=0.3, max_attempts=1)
    assert run.join() == 2 and server.requests == ["a1", "a1"]
    assert generated_ids(fake) == ["a1:0"]


def durable_ids(fake, *, limit, timeout=5.0):
    return load_durable_ids(clients=fake, topic=GENERATIONS, limit=limit, timeout=timeout)


def test_the_newest_committed_ids_of_every_partition_are_read_through_the_seam():
    fake = FakeKafka()
    fake.create_topic(GENERATIONS, 2)
    fake.append(GENERATIONS, b"v", key=None, partition=0)  # a record without a key is skipped
    for n in range(6):  # prompts 0, 2, 4 on partition 0; 1, 3, 5 on partition 1
        fake.append(GENERATIONS, b"v", key=f"{n:032x}:0".encode(), partition=n % 2)
    txn = fake.producer(transactional_id="other-worker")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(GENERATIONS, b"v", key=f"{9:032x}:0".encode())  # open: read_committed never sees it
    ids = durable_ids(fake, limit=4)
    covered = {n for n in (*range(6), 9) if ids.covers({"prompt_id": f"{n:032x}", "num_samples": 1})}
    assert covered == {2, 3, 4, 5}  # 4 // 2 partitions: the newest two of each
    (reader,) = fake.readers
    assert reader.closed and reader.settings["isolation_level"] == "read_committed"
    assert not fake.groups  # a reader joins no group and commits nothing


def test_a_limit_of_zero_reads_nothing():
    fake = FakeKafka()
    fake.create_topic(GENERATIONS, 1)
    assert len(durable_ids(fake, limit=0)) == 0 and fake.readers == []


def test_an_unreachable_broker_leaves_the_index_empty_and_never_stops_the_worker(caplog):
    class Unreachable(FakeKafka):
        def reader(self, **settings):
            raise KafkaTimeoutError("Unable to bootstrap from [localhost:1]")

    fake = Unreachable()
    fake.create_topic(GENERATIONS, 1)
    fake.append(GENERATIONS, b"v", key=f"{PID}:0".encode())
    with caplog.at_level(logging.WARNING):
        assert len(durable_ids(fake, limit=10)) == 0
    assert any("cannot read" in r.getMessage() for r in caplog.records)


def test_a_read_that_fails_midway_keeps_what_it_read_and_closes_the_reader(caplog):
    class GoesAway(FakeReader):
        def poll(self, timeout_ms=0, max_records=None, update_offsets=True):
            if self.polls:
                raise KafkaConnectionError("broker went away")
            return super().poll(timeout_ms, max_records=1)

    class Flaky(FakeKafka):
        def reader(self, **settings):
            self.readers.append(GoesAway(self, settings))
            return self.readers[-1]

    fake = Flaky()
    fake.create_topic(GENERATIONS, 1)
    for pid in (PID, "cd" * 16):
        fake.append(GENERATIONS, b"v", key=f"{pid}:0".encode())
    with caplog.at_level(logging.WARNING):
        ids = durable_ids(fake, limit=10)
    assert ids.covers({"prompt_id": PID, "num_samples": 1}) and len(ids) == 1
    assert fake.readers[0].closed and any("stopped reading" in r.getMessage() for r in caplog.records)


def test_a_worker_started_after_a_prompt_was_generated_skips_it_without_a_request():
    fake = kafka_with_prompts(0, partitions=1)
    fake.append(GENERATIONS, b"v", key=b"a1:0", partition=0)  # an earlier worker's, acknowledged
    for pid in ("a1", "b2"):
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    server = Server()
    run = WorkerRun(fake, server, exit_when_idle=0.3)
    assert run.join() == 2 and server.requests == ["b2"]
    assert [r.key for r in fake.read(GENERATIONS)] == [b"a1:0", b"b2:0"]
    assert fake.committed(KAFKA.default_group("generate"), PROMPTS, 0).offset == 2
