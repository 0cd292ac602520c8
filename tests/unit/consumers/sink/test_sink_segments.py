"""The sink's id index owner (in the segment builder's module): when it reads, forgets, what a claim sees."""

from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.segments import SinkIds
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import manifest, shards
from eaglefeed.schemas.columnar import GenerationBatch
from tests.unit.consumers.sink.sink_support import gen


def write(root, first, ids):
    """A segment of another sink: ``p{i}:0`` for each i of ``ids``, listed in the manifest."""
    name = shards.segment_name("x.generations", 0, first, first + len(ids) - 1)
    entry = shards.write_segment(root, name, shards.batch_to_table(GenerationBatch.from_records(
        [gen(i) for i in ids])))
    manifest.append_manifest(root, {"kind": "flush", "added": [entry]})


def make(root):
    registry = CollectorRegistry()
    return SinkIds(root=root, metrics=SinkMetrics.create(registry)), registry


def size(registry):
    return registry.get_sample_value("eaglefeed_sink_index_ids")


def test_the_first_claim_reads_what_the_dataset_holds(tmp_path):
    write(tmp_path, 0, [1, 2])
    ids, registry = make(tmp_path)
    assert ids.claim(["p2:0", "p3:0", "p3:0"]) == [False, True, False]
    assert size(registry) == 2  # the gauge shows what was read


def test_an_assignment_only_marks_the_index_and_the_next_claim_or_commit_reads(tmp_path):
    ids, registry = make(tmp_path)
    ids.committed(fenced=0)  # reads the empty dataset
    write(tmp_path, 0, [1])  # another sink writes
    assert ids.claim(["p1:0"]) == [True]  # not read again without an assignment
    write(tmp_path, 1, [2])
    ids.assigned(fenced=0)
    assert size(registry) == 0  # nothing read in the rebalance callback
    ids.committed(fenced=0)
    assert size(registry) == 2  # p1 (claimed, and now read too) and p2
    assert ids.claim(["p2:0"]) == [False]


def test_a_fenced_segment_makes_the_index_forget_its_claims(tmp_path):
    ids, _registry = make(tmp_path)
    assert ids.claim(["p1:0"]) == [True]
    ids.committed(fenced=0)  # no segment fenced: the claim stands
    assert ids.claim(["p1:0"]) == [False]
    ids.committed(fenced=1)  # its segment was fenced: p1 never reached the dataset
    assert ids.claim(["p1:0"]) == [True]
    ids.assigned(fenced=1)  # the same count again forgets nothing
    assert ids.claim(["p1:0"]) == [False]


def test_a_commit_after_a_fence_keeps_the_ids_of_a_segment_still_being_written(tmp_path):
    """Forgetting fenced claims must wait for the segments in flight: their ids are claimed but not
    yet in the dataset, and a redelivery of them would otherwise be written twice."""
    import threading

    from kafka.structs import TopicPartition

    from eaglefeed.consumers.sink.buffers import Buffers
    from eaglefeed.consumers.sink.checkpoint import SinkCheckpoint
    from eaglefeed.consumers.sink.segments import SegmentBuilder
    from eaglefeed.core.config import KafkaConfig, SinkConfig
    from eaglefeed.schemas import GENERATION
    from tests.unit.consumers.sink.sink_support import read_ids, records

    kafka = KafkaConfig(topic_prefix="x")
    a, b = TopicPartition(kafka.generations_topic, 0), TopicPartition(kafka.generations_topic, 1)
    held, release = threading.Event(), threading.Event()

    def slow_disk(step):  # B's segment waits on the writer thread until the test lets it go
        if threading.current_thread().name == "segment-writer" and step == "staged" and held.is_set():
            assert release.wait(10)

    metrics = SinkMetrics.create(CollectorRegistry())
    ids = SinkIds(root=tmp_path, metrics=metrics)
    builder = SegmentBuilder(ids=ids, producer=None, dead_letter_topic=kafka.dead_letter_topic,
                             metrics=metrics, crash=slow_disk)
    checkpoint = SinkCheckpoint(root=tmp_path, consumer=None, buffers=Buffers(
        cfg=SinkConfig(kafka=kafka, output=tmp_path), metrics=metrics), segments=builder, ids=ids,
        metrics=metrics, crash=slow_disk)
    checkpoint.assigned([a, b])
    manifest.ManifestTail(tmp_path).claim([f"{a.topic}:0"], "other:9:1")  # A has a newer owner
    checkpoint.write(a, records(a, [GENERATION.encode(gen(i)) for i in range(3)]))  # fenced
    checkpoint._writer.wait()  # written (fenced off), not yet reported by a commit
    held.set()
    checkpoint.write(b, records(b, [GENERATION.encode(gen(i)) for i in range(10, 13)]))  # in flight
    threading.Timer(0.5, release.set).start()
    checkpoint.commit()  # sees the fence
    held.clear()
    checkpoint.write(b, records(b, [GENERATION.encode(gen(i)) for i in range(10, 13)], start=3))  # again
    checkpoint.drain()
    checkpoint.close()
    assert sorted(read_ids(tmp_path)) == ["p10:0", "p11:0", "p12:0"]
    assert checkpoint.summary.duplicates_dropped == 3
