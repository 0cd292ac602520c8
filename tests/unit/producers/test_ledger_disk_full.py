"""A full disk under the producer's state dir: one clear line, and the last saved position intact."""

from __future__ import annotations

import errno
import os

import pytest

import eaglefeed.producers.ledger as ledger_module
from eaglefeed.core.errors import DiskFullError
from eaglefeed.producers.ledger import Ledger
from eaglefeed.producers.position import Position
from eaglefeed.producers.sources import Mark


def test_a_full_disk_keeps_the_last_position_and_says_where(tmp_path, monkeypatch):
    ledger = Ledger.for_run(tmp_path, "t", "f")
    ledger.advance(Mark("/a.jsonl", Position(10, 2, "ab"), 10))
    ledger.commit()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger_module.os, "fsync", full)
    ledger.advance(Mark("/a.jsonl", Position(20, 4, "cd"), 20))
    said = rf"no space left on the disk under {tmp_path} .*run produce again"
    with pytest.raises(DiskFullError, match=said):
        ledger.commit()
    monkeypatch.setattr(ledger_module.os, "fsync", os.fsync)
    ledger.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no half-written ledger
    again = Ledger.for_run(tmp_path, "t", "f")
    assert again.get("/a.jsonl") == Position(10, 2, "ab")  # the rows after it are read again
    again.close()
