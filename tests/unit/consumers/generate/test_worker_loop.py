"""The generate worker loop, driven through the fake Kafka and a scripted /generate (no broker or network)."""

import logging
import time

from kafka.errors import CommitFailedError, KafkaError, MessageSizeTooLargeError
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.wiring import PUBLISH_LINGER_MS
from eaglefeed.schemas import DEAD_LETTER, GENERATION, codec_for
from eaglefeed.schemas.codec import HEADER_LEN, MAGIC
from eaglefeed.schemas.done_offsets import decode_done, encode_done
from tests.factories import prompt
from tests.fakes.kafka import FakeProducer
from tests.running import wait_until
from tests.unit.consumers.generate.loop_support import (
    DEAD_LETTERS,
    GENERATIONS,
    PROMPTS,
    Server,
    WorkerRun,
    generated_ids,
    kafka_with_prompts,
)

TP0, TP1 = TopicPartition(PROMPTS, 0), TopicPartition(PROMPTS, 1)
GROUP = "t-generate"  # the default group follows the topic prefix


def committed(fake, tp):
    found = fake.committed(GROUP, tp.topic, tp.partition)
    return None if found is None else found.offset


def test_every_prompt_becomes_a_generation_and_the_worker_exits_when_idle():
    fake = kafka_with_prompts(3)
    server = Server(api_key="k")
    started = time.monotonic()
    run = WorkerRun(fake, server, api_key="k", exit_when_idle=0.3)
    assert run.join() == 6
    assert time.monotonic() - started >= 0.3
    assert sorted(generated_ids(fake)) == sorted(f"p{p}-{o}:0" for p in range(2) for o in range(3))
    assert committed(fake, TP0) == 3 and committed(fake, TP1) == 3
    assert {c.how for c in fake.commits} == {"commit"}
    assert fake.consumers[0].closed and fake.producers[0].closed
    assert run.metric("eaglefeed_worker_requests_total", outcome="ok") == 6


def test_the_worker_gathers_its_generation_records_into_fewer_produce_requests():
    # the shared 5 ms linger sent nearly every record as a request of its own (docs/BENCHMARKS.md, real vLLM)
    fake = kafka_with_prompts(1)
    assert WorkerRun(fake, Server(), exit_when_idle=0.2).join() == 2
    assert [p.settings.get("linger_ms") for p in fake.producers] == [PUBLISH_LINGER_MS]
    assert PUBLISH_LINGER_MS >= 50


def test_in_flight_work_counts_as_activity_for_exit_when_idle():
    fake = kafka_with_prompts(1, partitions=1)
    server = Server()
    server.hold("p0-0")
    run = WorkerRun(fake, server, exit_when_idle=0.2)
    wait_until(lambda: server.waiting, what="the request")
    time.sleep(0.4)  # twice the idle time, with a prompt in flight
    assert run.thread.is_alive()
    server.release()
    assert run.join() == 1 and committed(fake, TP0) == 1


def test_a_worker_without_its_assignment_yet_does_not_exit_when_idle():
    fake = kafka_with_prompts(2)
    joined = fake.delay_join(GROUP)
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    time.sleep(0.8)  # the join waits (dead members' sessions): not idle, not caught up
    assert run.thread.is_alive() and generated_ids(fake) == []
    joined.set()
    assert run.join() == 4
    assert committed(fake, TP0) == 2 and committed(fake, TP1) == 2


def test_a_worker_that_is_behind_does_not_exit_when_idle():
    fake = kafka_with_prompts(2, partitions=1)
    fetched = fake.stall_fetches(GROUP)
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    time.sleep(0.8)  # polls return nothing while two prompts wait
    assert run.thread.is_alive()
    fetched.set()
    assert run.join() == 2 and committed(fake, TP0) == 2


def test_a_coordinator_that_never_answers_committed_does_not_hang_the_worker(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.checkpoint.COMMITTED_TIMEOUT_MS", 50, raising=False)
    fake = kafka_with_prompts(2, partitions=1)
    fake.silence_coordinator(GROUP)  # never answers: without a timeout the consumer thread waits forever
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    assert run.join() == 2  # started with nothing to skip: redone work, never lost work


def test_an_undecodable_prompt_is_dead_lettered_and_its_offset_committed():
    fake = kafka_with_prompts(0, partitions=1)
    fake.append(PROMPTS, b"\x00garbage", key=b"bad", partition=0)
    fake.append(PROMPTS, None, partition=0)
    fake.append(PROMPTS, prompt("good"), partition=0)
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    assert run.join() == 3
    letters = [DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS)]
    assert [(d["error_kind"], d["offset"], d["value"], d["stage"]) for d in letters] == [
        ("undecodable_prompt", 0, b"\x00garbage", "generate"), ("undecodable_prompt", 1, None, "generate")]
    assert letters[0]["key"] == b"bad" and letters[0]["topic"] == PROMPTS
    assert generated_ids(fake) == ["good:0"] and committed(fake, TP0) == 3
    assert run.metric("eaglefeed_worker_dead_letters_total", reason="undecodable_prompt") == 2


def test_a_prompt_of_an_unknown_schema_version_is_dead_lettered_as_unknown_schema():
    fake = kafka_with_prompts(0, partitions=1)
    newer = b"\xc3\x01" + bytes(8) + b"from a newer producer"
    fake.append(PROMPTS, newer, key=b"new", partition=0)
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    assert run.join() == 1
    (letter,) = [DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS)]
    assert (letter["error_kind"], letter["value"]) == ("unknown_schema", newer)


def test_the_generation_schema_version_written_is_a_setting():
    """A rolling upgrade keeps new workers writing v1 until every sink reads v2 (docs/SCHEMAS.md)."""
    for version, codec in ((1, codec_for("generation", 1)), (None, GENERATION)):
        fake = kafka_with_prompts(2, partitions=1)
        run = WorkerRun(fake, Server(), exit_when_idle=0.2, generation_schema_version=version)
        assert run.join() == 2
        headers = {r.value[:HEADER_LEN] for r in fake.read(GENERATIONS)}
        assert headers == {MAGIC + codec.fingerprint}


def test_the_window_pauses_every_partition_until_work_drains():
    fake = kafka_with_prompts(6, partitions=1)
    server = Server()
    server.hold(*(f"p0-{o}" for o in range(6)))
    run = WorkerRun(fake, server, concurrency=1, exit_when_idle=0.3)  # window: 2 prompts
    wait_until(lambda: fake.consumers and fake.consumers[0].paused() == {TP0}, what="the pause")
    polls = fake.consumers[0].polls
    wait_until(lambda: fake.consumers[0].polls > polls + 5, what="more polls while paused")
    assert fake.consumers[0].position(TP0) == 2 and server.requests == ["p0-0"]  # one slot, two prompts
    server.release()
    assert run.join() == 6
    assert committed(fake, TP0) == 6 and len(generated_ids(fake)) == 6


def test_a_revoked_partition_commits_its_finished_watermark_and_cancels_its_work():
    fake = kafka_with_prompts(3)
    server = Server()
    server.hold("p0-1")
    run = WorkerRun(fake, server, commit_interval=60)  # only the revocation commits, until the end
    # every other prompt acknowledged (finished), not only sent: under load the ack can come later
    wait_until(lambda: {"p0-0:0", "p0-2:0"} <= set(generated_ids(fake)) and server.waiting
               and run.metric("eaglefeed_worker_records_published_total") >= 5, what="the others")
    fake.rebalance(revoke=[TP0]).wait(5)
    assert [(c.how, list(c.offsets)) for c in fake.commits] == [("commit_async", [TP0])]
    om = fake.commits[0].offsets[TP0]
    assert om.offset == 1 and decode_done(1, om.metadata) == {2}  # 2 finished above the watermark
    wait_until(lambda: not server.waiting, what="the cancellation of the revoked prompt")
    run.stop.set()
    assert run.join() == 5
    assert "p0-1:0" not in generated_ids(fake)
    assert committed(fake, TP0) == 1 and committed(fake, TP1) == 3


def test_work_that_finishes_after_its_partition_was_revoked_is_never_committed(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.loop._Worker._cancel", lambda self, tps: None)  # late
    fake = kafka_with_prompts(3, partitions=1)
    server = Server()
    server.hold("p0-1")
    run = WorkerRun(fake, server)
    wait_until(lambda: committed(fake, TP0) == 1 and "p0-2:0" in generated_ids(fake), what="the others")
    fake.rebalance(revoke=[TP0]).wait(5)
    seen = len(fake.commits)
    server.release()
    wait_until(lambda: "p0-1:0" in generated_ids(fake), what="the late result")  # published, but...
    time.sleep(0.1)  # several commit intervals
    run.stop.set()
    assert run.join() == 3
    assert all(TP0 not in c.offsets for c in fake.commits[seen:])  # ...never committed here
    assert committed(fake, TP0) == 1


def test_a_partition_assigned_again_redoes_its_unfinished_work_and_skips_what_the_metadata_lists():
    fake = kafka_with_prompts(3, partitions=1)
    fake.set_committed(GROUP, PROMPTS, 0, 1, encode_done(1, {2}))  # left by another member
    run = WorkerRun(fake, Server(), exit_when_idle=0.3)
    assert run.join() == 1
    assert generated_ids(fake) == ["p0-1:0"] and committed(fake, TP0) == 3


def test_a_lost_partition_commits_nothing():
    fake = kafka_with_prompts(2, partitions=1)
    server = Server()
    server.hold("p0-0")
    # No periodic commit before the loss: one (offset 0, p0-1 done above it) would be legitimate
    # and make the assertion below a race on a loaded machine.
    run = WorkerRun(fake, server, commit_interval=60)
    wait_until(lambda: "p0-1:0" in generated_ids(fake), what="the second prompt")
    fake.lose().wait(5)
    wait_until(lambda: not server.waiting, what="the cancellation of the lost partition's request")
    run.stop.set()
    assert run.join() == 1
    assert committed(fake, TP0) is None and fake.commits == []


def test_stop_drains_in_flight_work_starts_nothing_new_and_commits():
    fake = kafka_with_prompts(2, partitions=1)
    server = Server()
    server.hold("p0-0", "p0-1")
    run = WorkerRun(fake, server, drain_seconds=10)
    wait_until(lambda: server.waiting == {"p0-0", "p0-1"}, what="both requests")
    run.stop.set()
    wait_until(lambda: fake.consumers[0].paused() == {TP0}, what="the drain to pause the partition")
    fake.append(PROMPTS, prompt("late"), partition=0)
    time.sleep(0.1)
    assert run.thread.is_alive()  # draining
    server.release()
    assert run.join() == 2
    assert "late" not in server.requests and sorted(generated_ids(fake)) == ["p0-0:0", "p0-1:0"]
    assert committed(fake, TP0) == 2


def test_a_drain_that_runs_out_of_time_cancels_and_commits_only_what_finished():
    fake = kafka_with_prompts(2, partitions=1)
    server = Server()
    server.hold("p0-1")
    run = WorkerRun(fake, server, drain_seconds=0.1)
    wait_until(lambda: "p0-0:0" in generated_ids(fake) and server.waiting == {"p0-1"},
               what="the held request")
    run.stop.set()
    assert run.join() == 1
    assert committed(fake, TP0) == 1 and not server.waiting


def test_exactly_once_commits_offsets_only_inside_transactions_and_retries_an_aborted_one():
    fake = kafka_with_prompts(2)
    fake.fail_transactions(KafkaError("abortable"))
    run = WorkerRun(fake, Server(), exactly_once=True, exit_when_idle=0.3)
    assert run.join() == 4
    assert sorted(generated_ids(fake)) == ["p0-0:0", "p0-1:0", "p1-0:0", "p1-1:0"]  # once each
    assert len(generated_ids(fake, committed_only=False)) > 4  # the aborted transaction's copies
    assert {c.how for c in fake.commits} == {"transaction"}
    assert committed(fake, TP0) == 2 and committed(fake, TP1) == 2
    assert fake.producers[0].settings["transactional_id"] == "t-generate-w"
    assert run.metric("eaglefeed_worker_transactions_total", outcome="aborted") == 1
    assert run.metric("eaglefeed_worker_transactions_total", outcome="committed") >= 1


def test_an_exactly_once_worker_whose_commit_never_returns_goes_on_with_a_new_producer():
    fake = kafka_with_prompts(2)
    gates = [fake.hang_transactions(prepared=False), fake.hang_transactions(prepared=True)]
    run = WorkerRun(fake, Server(), exactly_once=True, exit_when_idle=0.5, transaction_deadline=0.3)
    try:
        assert run.join(timeout=20) == 4
    finally:
        for gate in gates:
            gate.set()
    assert sorted(generated_ids(fake)) == ["p0-0:0", "p0-1:0", "p1-0:0", "p1-1:0"]  # once each
    assert committed(fake, TP0) == 2 and committed(fake, TP1) == 2
    assert [p.state for p in fake.producers] == ["fenced", "fenced", "ready"]
    assert {p.settings["transactional_id"] for p in fake.producers} == {"t-generate-w"}
    assert run.metric("eaglefeed_worker_transactions_total", outcome="in_doubt") == 2


def test_prompts_of_an_aborted_transaction_that_come_back_after_a_rebalance_are_generated_again(monkeypatch):
    # leader-kill-eos lost 4 prompts so: their transaction aborted (the member had been dropped),
    # the partitions came back under a new epoch, and the prompts, read again, were skipped as
    # durable because their ids had entered the durable index when queued, not when committed.
    fake = kafka_with_prompts(2)
    commit = FakeProducer.commit_transaction
    failed: list[bool] = []

    def drop_the_member_once(producer: FakeProducer) -> None:
        if failed:
            return commit(producer)
        failed.append(True)
        fake.lose(group=GROUP)
        fake.rebalance(assign=[TP0, TP1], group=GROUP)
        producer.state = "abortable"
        raise CommitFailedError("Transaction offset commit failed: UnknownMemberIdError")

    monkeypatch.setattr(FakeProducer, "commit_transaction", drop_the_member_once)
    run = WorkerRun(fake, Server(), exactly_once=True, exit_when_idle=0.5)
    run.join()
    assert failed and run.metric("eaglefeed_worker_transactions_total", outcome="aborted") == 1
    assert sorted(generated_ids(fake)) == ["p0-0:0", "p0-1:0", "p1-0:0", "p1-1:0"]  # none lost
    assert committed(fake, TP0) == 2 and committed(fake, TP1) == 2


def test_failed_sends_are_sent_again_before_the_offset_is_committed(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.publish.RESEND_DELAY", 0.01)
    fake = kafka_with_prompts(1, partitions=1)
    fake.fail_sends(KafkaError("not acknowledged"), count=2)
    run = WorkerRun(fake, Server(), exit_when_idle=0.3)
    assert run.join() == 1
    assert generated_ids(fake) == ["p0-0:0"] and committed(fake, TP0) == 1


def test_a_generation_the_broker_refuses_for_good_is_dead_lettered_and_the_worker_goes_on(monkeypatch):
    monkeypatch.setattr("eaglefeed.consumers.generate.publish.RESEND_DELAY", 0.01)
    fake = kafka_with_prompts(1, partitions=1)
    # every send of the first prompt's generation is refused: larger than the broker accepts
    fake.fail_sends(MessageSizeTooLargeError("too large"), count=1000, topic=GENERATIONS)
    run = WorkerRun(fake, Server(), exit_when_idle=1.0)
    wait_until(lambda: fake.read(DEAD_LETTERS), what="the dead letter")
    with fake.lock:
        fake.send_failures.clear()
    fake.append(PROMPTS, prompt("p0-1"), key=b"k", partition=0)  # the worker goes on
    assert run.join() == 2 and committed(fake, TP0) == 2
    (letter,) = [DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS)]
    assert letter["error_kind"] == "publish_rejected" and "MessageSizeTooLarge" in letter["message"]
    assert letter["record_id"] == "p0-0:0" and letter["offset"] == 0
    assert generated_ids(fake) == ["p0-1:0"]


def test_a_blocking_send_never_stalls_the_event_loop():
    fake = kafka_with_prompts(1, partitions=1)
    released = fake.block_sends()  # as kafka-python's send() waiting up to max_block_ms for metadata
    server = Server()
    run = WorkerRun(fake, server, exit_when_idle=0.3)
    wait_until(lambda: server.requests, what="the request")
    time.sleep(0.2)  # the send is blocked by now
    polls = fake.consumers[0].polls
    time.sleep(0.3)
    assert fake.consumers[0].polls > polls + 3  # the loop still polls (and heartbeats, commits)
    released.set()
    assert run.join() == 1 and committed(fake, TP0) == 1


def test_a_stop_before_the_topic_exists_returns_at_once():
    from tests.fakes.kafka import FakeKafka

    run = WorkerRun(FakeKafka(), Server())
    run.stop.set()
    assert run.join() == 0


def test_a_tokenizer_the_worker_cannot_load_stops_it_without_dead_letters_or_commits():
    """A configuration problem (issue 18, item 2): nothing becomes a dead letter, nothing is committed."""
    import pytest

    from eaglefeed.core.errors import ConfigError
    from eaglefeed.schemas import PROMPT

    fake = kafka_with_prompts(0, partitions=1)
    for i in range(3):
        record = PROMPT.decode(prompt(f"q{i}"))
        fake.append(PROMPTS, PROMPT.encode({**record, "tokenizer_id": "/nonexistent/tokenizer"}), partition=0)
    run = WorkerRun(fake, Server(), check_vocab=True, vocab_size=None, exit_when_idle=5)
    with pytest.raises(ConfigError, match="/nonexistent/tokenizer.*make it available to the worker"):
        run.join()
    assert list(fake.read(DEAD_LETTERS)) == [] and generated_ids(fake, committed_only=False) == []
    assert committed(fake, TP0) in (None, 0)


def test_results_of_partitions_that_moved_while_the_worker_stood_still_are_not_published(monkeypatch):
    """A worker paused past its session timeout wakes up with responses waiting: the group gave their
    partition to another member meanwhile, which generates them again. They must not be published."""
    monkeypatch.setattr("eaglefeed.consumers.generate.loop._Worker._cancel", lambda self, tps: None)  # late
    monkeypatch.setattr("eaglefeed.consumers.generate.rebalance.HOLD_SECONDS", 0.3)
    fake = kafka_with_prompts(2, partitions=1)
    server = Server()
    server.hold("p0-0")
    run = WorkerRun(fake, server, session_timeout=0.2)
    wait_until(lambda: "p0-1:0" in generated_ids(fake) and server.waiting, what="the second prompt")
    fake.lose().wait(5)  # the session expired: the partition went to another member
    server.stalls["p0-0"] = 0.5  # its response comes in as the worker stands still for 0.5 s
    server.release()
    time.sleep(1.0)
    run.stop.set()
    run.join()
    assert generated_ids(fake) == ["p0-1:0"]  # p0-0 is the new owner's to publish


def test_the_worker_logs_a_progress_line_every_progress_seconds(caplog):
    fake = kafka_with_prompts(2, partitions=1)
    server = Server()
    server.hold("p0-1")
    with caplog.at_level(logging.INFO, logger="eaglefeed.progress"):
        run = WorkerRun(fake, server, progress_seconds=0.05)
        wait_until(lambda: any("1 prompts done" in r.getMessage() for r in caplog.records),
                   what="a progress line")
        server.release()
        wait_until(lambda: any("2 prompts done" in r.getMessage() for r in caplog.records),
                   what="the next one")
        run.stop.set()
        run.join()
    lines = [r.getMessage() for r in caplog.records if r.name == "eaglefeed.progress"]
    assert any(line.startswith("generate: 1 prompts done, ") and "lag 0 (+1 in flight), ETA " in line
               for line in lines), lines
    assert any(line.startswith("generate: 2 prompts done, ") and line.endswith("lag 0, caught up")
               for line in lines), lines
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "eaglefeed.progress")


def test_no_progress_line_with_progress_seconds_zero(caplog):
    with caplog.at_level(logging.INFO, logger="eaglefeed.progress"):
        run = WorkerRun(kafka_with_prompts(2), Server(), exit_when_idle=0.3, progress_seconds=0)
        assert run.join() == 4
    assert not [r for r in caplog.records if r.name == "eaglefeed.progress"]
