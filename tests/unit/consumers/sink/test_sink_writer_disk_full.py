"""A full disk at the sink's write seam: one clear error naming the dataset and the space left."""

import errno

import pytest

import eaglefeed.dataset.shards as shards
from eaglefeed.consumers.sink.writer import SegmentWriter
from eaglefeed.core.diskspace import is_disk_full
from eaglefeed.core.errors import DiskFullError
from eaglefeed.dataset import manifest
from tests.unit.consumers.sink.test_sink_writer import job


def test_out_of_space_while_staging_a_segment_is_a_disk_full_error(tmp_path, monkeypatch):
    writer = SegmentWriter(tmp_path, crash=lambda step: None)
    writer.submit(job(0, rows=1))
    writer.wait()

    def full(root, name, table):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards, "stage_segment", full)
    writer.submit(job(1, rows=1))
    said = rf"no space left on the disk under {tmp_path} \([\d,]+ bytes free\)"
    with pytest.raises(DiskFullError, match=said):
        writer.wait()
    assert writer.failed
    assert len(manifest.read_manifest(tmp_path)) == 1  # the failed segment was never listed
    assert not list((tmp_path / "segments").glob(".*"))  # nor left behind as a temp file
    with pytest.raises(DiskFullError, match="start the sink again"):
        writer.close()


def test_other_write_errors_stay_what_they_are(tmp_path, monkeypatch):
    def denied(root, name, table):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(shards, "stage_segment", denied)
    writer = SegmentWriter(tmp_path, crash=lambda step: None)
    writer.submit(job(1, rows=1))
    with pytest.raises(RuntimeError, match="Permission denied"):
        writer.wait()


@pytest.mark.parametrize("code, full", [(errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EIO, False)])
def test_is_disk_full_looks_through_the_cause_chain(code, full):
    try:
        try:
            raise OSError(code, "x")
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped) is full
