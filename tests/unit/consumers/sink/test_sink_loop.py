"""``run_sink`` through the in-memory Kafka: exactly once, rebalances, drain, idle exit, poison records."""

import logging
import threading
import time

import pytest
from kafka.errors import KafkaTimeoutError
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.loop import POLL_MS, run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset import manifest
from eaglefeed.schemas import DEAD_LETTER, GENERATION
from tests.fakes.kafka import FakeKafka
from tests.running import wait_until
from tests.unit.consumers.sink.sink_support import gen, read_ids

KAFKA = KafkaConfig(topic_prefix="x")
TOPIC, DLQ, GROUP = KAFKA.generations_topic, KAFKA.dead_letter_topic, KAFKA.default_group("sink")


@pytest.fixture
def kafka():
    fake = FakeKafka()
    fake.create_topic(TOPIC, partitions=2)
    fake.create_topic(DLQ)
    return fake


def config(root, **overrides):
    settings = {"flush_rows": 1000, "flush_seconds": 600.0, **overrides}
    return SinkConfig(kafka=KAFKA, output=root, **settings)


def produce(kafka, ids, partition=0):
    for i in ids:
        kafka.append(TOPIC, GENERATION.encode(gen(i)), key=f"p{i}:0".encode(), partition=partition)


class Running:
    """``run_sink`` on a thread, stopped by :meth:`stop`; the registry shows what it buffers."""

    def __init__(self, kafka, cfg):
        self.stop_signal, self.registry = StopSignal(), CollectorRegistry()
        self.summary, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(kafka, cfg), daemon=True)
        self.thread.start()

    def _run(self, kafka, cfg):
        try:
            self.summary = run_sink(cfg, stop=self.stop_signal, registry=self.registry, clients=kafka)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self.error = exc

    def buffered(self):
        return self.registry.get_sample_value("eaglefeed_sink_buffered_records")

    def wait_buffered(self, count):
        wait_until(lambda: self.buffered() == count, what=f"{count} buffered records")

    def stop(self):
        self.stop_signal.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.summary


def committed(kafka, partition):
    meta = kafka.committed(GROUP, TOPIC, partition)
    return None if meta is None else meta.offset


def resume(root):
    return manifest.resume_offsets(manifest.read_manifest(root))


def test_every_row_is_written_once_and_the_offsets_follow(kafka, tmp_path):
    produce(kafka, range(5), partition=0)
    produce(kafka, range(5, 8), partition=1)
    summary = run_sink(config(tmp_path, flush_rows=2, exit_when_idle=0.2), clients=kafka)
    assert sorted(read_ids(tmp_path)) == [f"p{i}:0" for i in range(8)]
    assert summary.rows_written == 8 and summary.segments == 5  # 2+2+1 and 2+1
    assert resume(tmp_path) == {f"{TOPIC}:0": 5, f"{TOPIC}:1": 3}
    assert (committed(kafka, 0), committed(kafka, 1)) == (5, 3)


def test_the_session_timeout_is_the_sinks_own(kafka, tmp_path):
    run_sink(config(tmp_path, exit_when_idle=0.2, session_timeout=6), clients=kafka)
    run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    assert [c.settings.get("session_timeout_ms") for c in kafka.consumers] == [6000, None]  # None: default


def test_the_sink_asks_the_broker_to_gather_its_fetches(kafka, tmp_path):
    # kafka-python's default (1 byte) answered a fetch for nearly every record the workers published,
    # and the sink and the broker spent their CPU per request (docs/BENCHMARKS.md, real vLLM)
    run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    settings = kafka.consumers[0].settings
    assert settings["fetch_min_bytes"] >= 64 * 1024
    assert settings["fetch_max_wait_ms"] <= POLL_MS  # never longer than a poll: no later idle exit


def test_a_revocation_writes_the_buffered_rows_before_the_partitions_go(kafka, tmp_path):
    sink = Running(kafka, config(tmp_path))
    produce(kafka, range(3), partition=0)
    produce(kafka, range(3, 5), partition=1)
    sink.wait_buffered(5)
    assert read_ids(tmp_path) == []
    # The sink's group is eager: everything is revoked, then partition 1 comes back.
    kafka.rebalance(revoke=[(TOPIC, 0)]).wait(10)
    assert sorted(read_ids(tmp_path)) == [f"p{i}:0" for i in range(5)]  # before the callback returned
    assert resume(tmp_path) == {f"{TOPIC}:0": 3, f"{TOPIC}:1": 2}
    produce(kafka, [5], partition=0)  # no longer ours
    produce(kafka, [6], partition=1)
    sink.wait_buffered(1)
    summary = sink.stop()
    assert sorted(read_ids(tmp_path)) == [f"p{i}:0" for i in (0, 1, 2, 3, 4, 6)]
    assert summary.rows_written == 6 and summary.duplicates_dropped == 0
    assert resume(tmp_path) == {f"{TOPIC}:0": 3, f"{TOPIC}:1": 3}


def test_a_lost_partition_drops_its_buffer_without_writing_or_committing(kafka, tmp_path):
    sink = Running(kafka, config(tmp_path))
    produce(kafka, range(3), partition=0)
    produce(kafka, [3], partition=1)
    sink.wait_buffered(4)
    kafka.lose([(TOPIC, 0)]).wait(10)
    sink.wait_buffered(1)
    summary = sink.stop()
    assert read_ids(tmp_path) == ["p3:0"]
    assert resume(tmp_path) == {f"{TOPIC}:1": 1}
    assert committed(kafka, 0) is None and committed(kafka, 1) == 1
    assert summary.rows_written == 1


def test_on_assignment_the_sink_resumes_at_the_manifest_not_at_the_group_offset(kafka, tmp_path):
    produce(kafka, range(4), partition=0)
    run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    kafka.set_committed(GROUP, TOPIC, 0, 0)  # as if the sink died between manifest and commit
    produce(kafka, [4], partition=0)
    summary = run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    assert summary.rows_written == 1
    assert summary.duplicates_dropped == 0  # the seek skipped them: nothing was even read again
    assert sorted(read_ids(tmp_path)) == [f"p{i}:0" for i in range(5)]
    assert committed(kafka, 0) == 5


def test_a_stop_writes_what_is_buffered_and_commits_it(kafka, tmp_path):
    sink = Running(kafka, config(tmp_path))
    produce(kafka, range(3), partition=0)
    sink.wait_buffered(3)
    assert kafka.commits == []
    summary = sink.stop()
    assert summary.rows_written == 3 and sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p2:0"]
    assert committed(kafka, 0) == 3
    assert kafka.consumers[0].closed and kafka.producers[0].closed


def test_an_idle_sink_exits_by_itself_after_a_final_flush(kafka, tmp_path):
    produce(kafka, range(2), partition=1)
    started = time.monotonic()
    summary = run_sink(config(tmp_path, exit_when_idle=0.3), clients=kafka)
    assert time.monotonic() - started >= 0.3
    assert summary.rows_written == 2 and committed(kafka, 1) == 2


def test_an_idle_sink_waits_for_its_assignment_before_it_counts_idle_time(kafka, tmp_path):
    # The bug: a join that waited for dead members' sessions counted as idle, and the sink exited
    # with 0 rows while the topic was full.
    produce(kafka, range(4), partition=0)
    joined = kafka.delay_join(GROUP)
    sink = Running(kafka, config(tmp_path, exit_when_idle=0.2))
    time.sleep(0.8)  # four times the idle time without an assignment
    assert sink.thread.is_alive() and read_ids(tmp_path) == []
    joined.set()
    sink.thread.join(10)
    assert not sink.thread.is_alive()
    summary = sink.stop()
    assert summary.rows_written == 4 and summary.lag_at_exit == 0


def test_an_idle_sink_that_is_behind_does_not_exit(kafka, tmp_path):
    produce(kafka, range(3), partition=1)
    fetched = kafka.stall_fetches(GROUP)
    sink = Running(kafka, config(tmp_path, exit_when_idle=0.2))
    time.sleep(0.8)  # polls return nothing, but partition 1 has 3 records to read
    assert sink.thread.is_alive()
    fetched.set()
    sink.thread.join(10)
    summary = sink.stop()
    assert summary.rows_written == 3 and summary.lag_at_exit == 0
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p2:0"]


def test_a_stop_before_the_topic_exists_returns_at_once(tmp_path):
    stop = StopSignal()
    stop.set()
    summary = run_sink(config(tmp_path), stop=stop, clients=FakeKafka())
    assert summary.rows_written == 0 and not (tmp_path / "manifest.jsonl").exists()


def test_a_poison_record_is_dead_lettered_and_the_rest_written(kafka, tmp_path):
    produce(kafka, [0], partition=0)
    kafka.append(TOPIC, b"\x00not avro", key=b"poison", partition=0)
    produce(kafka, [1], partition=0)
    summary = run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    (letter,) = [DEAD_LETTER.decode(r.value) for r in kafka.read(DLQ)]
    assert (letter["stage"], letter["error_kind"], letter["offset"]) == ("sink", "undecodable_generation", 1)
    assert letter["key"] == b"poison" and letter["value"] == b"\x00not avro"
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0"]
    assert summary.dead_lettered == 1 and committed(kafka, 0) == 3
    (event,) = [e for e in manifest.read_manifest(tmp_path) if e["kind"] == "flush"]
    assert event["dead_lettered"] == 1 and event["dead_letter_kinds"] == {"undecodable_generation": 1}


def test_a_dead_letter_the_broker_refuses_stops_the_sink_before_the_segment_is_recorded(kafka, tmp_path):
    kafka.fail_sends(KafkaTimeoutError("dead-letter topic unreachable"), topic=DLQ)
    produce(kafka, [0], partition=0)
    kafka.append(TOPIC, b"\x00not avro", partition=0)
    with pytest.raises(KafkaTimeoutError, match="unreachable"):
        run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {} and read_ids(tmp_path) == []
    assert committed(kafka, 0) is None


def test_duplicate_ids_are_written_once(kafka, tmp_path):
    produce(kafka, [0, 1, 0], partition=0)
    produce(kafka, [1, 2], partition=1)  # a re-delivery can land on another partition
    summary = run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    assert sorted(read_ids(tmp_path)) == ["p0:0", "p1:0", "p2:0"]
    assert summary.duplicates_dropped == 2 and summary.rows_written == 3
    assert (committed(kafka, 0), committed(kafka, 1)) == (3, 2)


def test_a_record_of_an_unknown_schema_version_is_dead_lettered_as_such(kafka, tmp_path):
    """A writer upgraded before this sink: the letter says so and keeps the bytes to re-drive."""
    newer = b"\xc3\x01" + bytes(range(8)) + b"a body this sink cannot know"
    kafka.append(TOPIC, newer, key=b"newer", partition=0)
    produce(kafka, [1], partition=0)
    summary = run_sink(config(tmp_path, exit_when_idle=0.2), clients=kafka)
    (letter,) = [DEAD_LETTER.decode(r.value) for r in kafka.read(DLQ)]
    assert (letter["error_kind"], letter["value"]) == ("unknown_schema", newer)
    assert "fingerprint 0001020304050607" in letter["message"]
    assert summary.rows_written == 1


def test_the_sink_logs_a_progress_line_every_progress_seconds(kafka, tmp_path, caplog):
    produce(kafka, range(5), partition=0)
    with caplog.at_level(logging.INFO, logger="eaglefeed.progress"):
        run = Running(kafka, config(tmp_path, progress_seconds=0.05))
        run.wait_buffered(5)
        wait_until(lambda: any("(+5 buffered)" in r.getMessage() for r in caplog.records),
                   what="a progress line")
        assert run.stop().rows_written == 5
    lines = [r.getMessage() for r in caplog.records if r.name == "eaglefeed.progress"]
    # a partition's segment rolls at 1000 records: these wait, buffered, until the final flush
    assert any(line.startswith("sink: 0 records (0 rows written) done, ") and "lag 0 (+5 buffered), ETA "
               in line for line in lines), lines


def test_the_sinks_progress_line_counts_rows_written_and_duplicates(kafka, tmp_path, caplog):
    produce(kafka, [1, 2, 2, 3], partition=0)
    with caplog.at_level(logging.INFO, logger="eaglefeed.progress"):
        run = Running(kafka, config(tmp_path, flush_rows=2, progress_seconds=0.05))
        wait_until(lambda: any("caught up" in r.getMessage() for r in caplog.records),
                   what="a caught-up line")
        run.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "eaglefeed.progress"]
    assert any(line.startswith("sink: 4 records (3 rows written, 1 duplicates dropped) done, ")
               and line.endswith("lag 0, caught up") for line in lines), lines


def test_a_drained_partition_is_committed_past_an_exactly_once_workers_commit_marker(kafka, tmp_path):
    # Readers commit one past their last record; the marker after it kept the group's lag at 1 for
    # good, so another member's --exit-when-idle (group-wide) and `status` never saw it done.
    producer = kafka.producer(transactional_id="w")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send(TOPIC, GENERATION.encode(gen(i)), key=f"p{i}:0".encode(), partition=0)
    producer.commit_transaction()
    tp_end = 4  # three records and the commit marker
    summary = run_sink(config(tmp_path / "out", flush_seconds=0.05, exit_when_idle=0.5), clients=kafka)
    assert summary.rows_written == 3
    committed = kafka.committed(GROUP, TOPIC, 0)
    assert committed is not None and committed.offset == tp_end
