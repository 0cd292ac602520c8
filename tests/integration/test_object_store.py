"""Datasets whose home is a real S3-compatible server (s3proxy from Maven jars), through local mirrors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.store import ObjectStore, StoreError, mirror_of, open_dataset, parse
from eaglefeed.dataset.store.mirror import Mirror, event_path
from eaglefeed.dataset.store.sync import pull
from eaglefeed.schemas.columnar import GenerationBatch
from tests.unit.dataset.test_ids import gen

pytestmark = pytest.mark.kafka  # needs a server the session starts (the store, not the broker)


def commit(root: Path, first: int, count: int) -> dict:
    records = [gen(first + k) for k in range(count)]
    entry = shards.write_segment(root, shards.segment_name("g", 0, first, first + count - 1),
                                 shards.batch_to_table(GenerationBatch.from_records(records)))
    manifest.append_manifest(root, {"kind": "flush", "added": [entry],
                                    "offsets": {"gen:0": [first, first + count - 1]}})
    return entry


def live_rows(root: Path) -> int:
    return sum(seg["rows"] for seg in manifest.live_segments(manifest.read_manifest(root)).values())


def test_commits_reach_the_store_and_a_second_mirror_reads_them(s3_env, s3_uri, tmp_path):
    root = open_dataset(s3_uri)
    assert mirror_of(root) is not None and str(root).startswith(str(tmp_path / "mirrors"))
    entries = [commit(root, 0, 5), commit(root, 5, 3)]
    store = ObjectStore(parse(s3_uri))
    assert list(store.paths("manifest")) == [event_path(1), event_path(2)]
    for entry in entries:  # each segment was uploaded before its event
        assert store.size(entry["path"]) == entry["bytes"]

    other = open_dataset(s3_uri, cache_dir=tmp_path / "elsewhere")  # another host's mirror
    assert other != root
    assert manifest.read_manifest(other) == manifest.read_manifest(root)
    assert live_rows(other) == 8 and all((other / e["path"]).exists() for e in entries)
    assert manifest.resume_offsets(manifest.read_manifest(other)) == {"gen:0": 8}


def test_a_deleted_mirror_is_rebuilt_from_the_store(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    commit(root, 0, 4)
    shutil.rmtree(root)
    root = open_dataset(s3_uri)
    assert live_rows(root) == 4
    commit(root, 4, 2)  # appends go on after the events the store holds, not over them
    assert list(ObjectStore(parse(s3_uri)).paths("manifest")) == [event_path(1), event_path(2)]


def test_an_event_the_mirror_missed_is_pulled_not_lost(s3_env, s3_uri):
    # A writer killed after its put (the commit) and before its local append.
    root = open_dataset(s3_uri)
    commit(root, 0, 2)
    lines = (root / manifest.MANIFEST).read_bytes().splitlines(True)
    commit(root, 2, 2)
    (root / manifest.MANIFEST).write_bytes(b"".join(lines))
    mirror = mirror_of(root)
    assert isinstance(mirror, Mirror) and pull(mirror) == 1
    assert live_rows(root) == 4


def test_a_dataset_begun_again_in_the_store_empties_the_mirror(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    commit(root, 0, 3)
    store = ObjectStore(parse(s3_uri))
    for rel in list(store.paths("manifest")) + list(store.paths("segments")):
        store.delete(rel)  # `aws s3 rm --recursive`: the dataset is gone
    assert open_dataset(s3_uri) == root
    assert manifest.read_manifest(root) == [] and not list((root / "segments").glob("*.parquet"))


def test_a_conditional_put_the_store_refuses_stops_the_writer(s3_env, s3_uri):
    # s3proxy's filesystem backend does not honour If-None-Match; a store that does (S3, MinIO,
    # R2) answers 412 to a second writer of one event number, which must stop the writer.
    root = open_dataset(s3_uri)
    mirror = mirror_of(root)
    assert mirror is not None

    def refuse(rel, data, *, if_absent=False):
        from eaglefeed.dataset.store.client import ConditionFailedError
        raise ConditionFailedError(rel)

    mirror.store.put_bytes = refuse  # type: ignore[method-assign]
    with pytest.raises(manifest.ManifestError, match="committed by another writer"):
        commit(root, 0, 1)
    assert manifest.read_manifest(root) == []  # nothing committed locally either


def test_wrong_credentials_are_one_line(s3_env, s3_uri, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StoreError) as caught:
        open_dataset(s3_uri)
    message = str(caught.value)
    assert "\n" not in message and s3_uri.split("/")[2] in message and "403" in message


def test_the_mirror_records_its_store(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    assert json.loads((root / "remote.json").read_text()) == {"uri": s3_uri}
