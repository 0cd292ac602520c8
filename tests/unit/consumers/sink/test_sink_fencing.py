"""A sink that loses a partition without an orderly revoke never writes behind the partition's next owner.

Two sink members share one dataset, through the in-memory Kafka. The fake has one member per
group, so each member is in a group of its own; the group change is what the fake scripts:
``lose`` for the member whose session expired, a first assignment for the one taking over.
"""

import logging
import threading
from collections import Counter

import pytest
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.checkpoint import SinkCheckpoint, SinkRebalance
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import manifest
from eaglefeed.schemas import GENERATION
from tests.fakes.kafka import FakeKafka
from tests.unit.consumers.sink.sink_support import gen, read_ids

KAFKA = KafkaConfig(topic_prefix="x")
TOPIC = KAFKA.generations_topic
TP = TopicPartition(TOPIC, 0)


class WriterGate:
    """A crash hook that holds the segment-writer thread at its first step until released (a stalled sink)."""

    def __init__(self) -> None:
        self.reached, self.released = threading.Event(), threading.Event()

    def __call__(self, step: str) -> None:
        if threading.current_thread().name == "segment-writer" and not self.released.is_set():
            self.reached.set()
            assert self.released.wait(10), "the test never released the writer"


class Member:
    """One sink process's pieces, driven by hand the way ``eaglefeed.consumers.sink.loop`` drives them."""

    def __init__(self, kafka: FakeKafka, root, group: str, crash=lambda step: None) -> None:
        cfg = SinkConfig(kafka=KAFKA, output=root, flush_rows=1000, flush_seconds=600.0)
        self.registry = CollectorRegistry()
        metrics = SinkMetrics.create(self.registry)
        self.consumer = kafka.consumer(group)
        self.buffers = Buffers(cfg=cfg, metrics=metrics)
        ids = SinkIds(root=root, metrics=metrics)
        self.segments = SegmentBuilder(ids=ids, producer=kafka.producer(), metrics=metrics, crash=crash,
                                       dead_letter_topic=KAFKA.dead_letter_topic)
        self.checkpoint = SinkCheckpoint(root=root, consumer=self.consumer, buffers=self.buffers,
                                         segments=self.segments, ids=ids, metrics=metrics, crash=crash)
        kafka.subscribe(self.consumer, [TOPIC], SinkRebalance(self.checkpoint))

    def poll(self) -> int:
        """One poll: rebalance callbacks, then buffer what came; returns the records buffered."""
        batch = self.consumer.poll(timeout_ms=10)
        for tp, records in batch.items():
            self.buffers.add(tp, records)
        return sum(len(r) for r in batch.values())

    def flush(self) -> None:
        """Hand everything buffered to the writer (without waiting for it)."""
        for tp, messages in self.buffers.take_due(0.0, force=True):
            self.checkpoint.write(tp, messages)


def produce(kafka: FakeKafka, ids) -> None:
    for i in ids:
        kafka.append(TOPIC, GENERATION.encode(gen(i)), key=f"p{i}:0".encode())


@pytest.fixture
def kafka():
    fake = FakeKafka()
    fake.create_topic(TOPIC, partitions=1)
    fake.create_topic(KAFKA.dead_letter_topic)
    return fake


def test_a_sink_that_lost_its_partition_never_appends_its_queued_segment(kafka, tmp_path, caplog):
    produce(kafka, range(10))
    gate = WriterGate()
    stalled = Member(kafka, tmp_path, "sink-a", crash=gate)
    assert stalled.poll() == 10  # joins (the partition is assigned) and fetches
    stalled.flush()  # its segment of offsets 0-9 is queued, and the writer stalls (SIGSTOP, a slow disk)
    assert gate.reached.wait(10)

    # Its session expires; the group gives the partition to another member, which reads the
    # manifest (nothing there yet), reads from offset 0 and writes everything, more records included.
    produce(kafka, range(10, 15))
    owner = Member(kafka, tmp_path, "sink-b")
    assert owner.poll() == 15
    owner.flush()
    assert owner.checkpoint.drain() == {TP: 15}

    # The stalled sink resumes: its writer goes on before its consumer notices the loss.
    gate.released.set()
    with caplog.at_level(logging.WARNING, logger="eaglefeed.consumers.sink.checkpoint"):
        committed = stalled.checkpoint.drain()
    dropped = [r.getMessage() for r in caplog.records if r.name.endswith("sink.checkpoint")]
    assert dropped == [  # the partition and its offsets as a person reads them
        f"dropped a segment of {TOPIC}-0 (offsets 0-9): the partition has a newer owner"]
    kafka.lose(group="sink-a")
    stalled.poll()  # on_partitions_lost

    ids = read_ids(tmp_path)  # every file the manifest lists exists
    assert Counter(ids) == Counter(f"p{i}:0" for i in range(15))  # each id exactly once
    assert committed == {}  # nothing committed for a partition not ours
    assert manifest.resume_offsets(manifest.read_manifest(tmp_path)) == {f"{TOPIC}:0": 15}
    assert stalled.checkpoint.summary.rows_written == 0
    assert stalled.registry.get_sample_value("eaglefeed_sink_segments_fenced_total") == 1
    assert sorted(p.name for p in (tmp_path / "segments").iterdir()) == [
        f"{TOPIC}-p0000-00000000000000000000-00000000000000000014.parquet"]  # no file of the fenced segment
    assert kafka.committed("sink-a", TOPIC, 0) is None


def test_a_fenced_segment_leaves_no_ids_behind_in_the_index(kafka, tmp_path):
    """The stalled sink claimed the ids of its fenced segment; when the partition comes back to it
    from an owner that wrote nothing, those records must still become rows."""
    produce(kafka, range(5))
    gate = WriterGate()
    stalled = Member(kafka, tmp_path, "sink-a", crash=gate)
    assert stalled.poll() == 5
    stalled.flush()
    assert gate.reached.wait(10)
    other = Member(kafka, tmp_path, "sink-b")
    other.poll()  # claims the partition, then dies before writing anything
    gate.released.set()
    stalled.checkpoint.drain()
    assert read_ids(tmp_path) == []

    kafka.lose(group="sink-a")
    stalled.poll()  # lost
    kafka.rebalance(assign=[TP], group="sink-a")
    assert stalled.poll() == 5  # the partition is ours again, under a new claim
    stalled.flush()
    stalled.checkpoint.drain()
    assert sorted(read_ids(tmp_path)) == sorted(f"p{i}:0" for i in range(5))


def _stage_then_lose_the_temp_file(monkeypatch, gate: threading.Event, started: threading.Event):
    """``stage_segment`` as it goes when the partition's next owner deletes the temp file meanwhile."""
    from eaglefeed.dataset import shards

    def staging(root, name, table):
        started.set()
        assert gate.wait(10), "the test never released the writer"
        raise FileNotFoundError(2, "No such file or directory", f".{name}.tmp")

    monkeypatch.setattr(shards, "stage_segment", staging)


def test_a_temp_file_deleted_by_the_next_owner_fences_the_job_instead_of_stopping_the_sink(
        kafka, tmp_path, monkeypatch):
    # Seen in the sink-pause scenario: the new owner's clean-up of unlisted temp files removed the
    # old owner's segment mid-write; the old owner's writer died of FileNotFoundError.
    produce(kafka, range(5))
    gate, started = threading.Event(), threading.Event()
    stalled = Member(kafka, tmp_path, "sink-a")
    assert stalled.poll() == 5
    with monkeypatch.context() as patch:
        _stage_then_lose_the_temp_file(patch, gate, started)
        stalled.flush()
        assert started.wait(10)
        owner = Member(kafka, tmp_path, "sink-b")  # claims the partition
        assert owner.poll() == 5
        gate.set()
        assert stalled.checkpoint.drain() == {}  # fenced, not an error
    owner.flush()
    owner.checkpoint.drain()
    assert Counter(read_ids(tmp_path)) == Counter(f"p{i}:0" for i in range(5))
    assert stalled.registry.get_sample_value("eaglefeed_sink_segments_fenced_total") == 1


def test_a_temp_file_lost_while_the_partition_is_still_ours_is_an_error(kafka, tmp_path, monkeypatch):
    produce(kafka, range(3))
    gate, started = threading.Event(), threading.Event()
    gate.set()
    sink = Member(kafka, tmp_path, "sink-a")
    assert sink.poll() == 3
    _stage_then_lose_the_temp_file(monkeypatch, gate, started)
    sink.flush()
    with pytest.raises(RuntimeError, match="FileNotFoundError"):
        sink.checkpoint.drain()


def test_two_writers_of_one_segment_never_share_a_temp_file(tmp_path):
    from eaglefeed.dataset import shards

    first, second = (shards.ParquetFile(tmp_path, "seg.parquet") for _ in range(2))
    assert first.tmp != second.tmp and first.final == second.final
    first.abort()
    second.abort()
