"""The sink's id index owner: when it reads the dataset, when it forgets, what a claim sees."""

from prometheus_client import CollectorRegistry
from sink_support import gen

from eaglefeed.consumers.sink.ids import SinkIds
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import manifest, shards
from eaglefeed.schemas.columnar import GenerationBatch


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
