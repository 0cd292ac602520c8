"""The input stream: resuming from the ledger, following appended lines and new files."""

from __future__ import annotations

import json
import os
import time

import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.producers.follow import IDLE, input_stream
from eaglefeed.producers.ledger import Ledger
from eaglefeed.producers.sources import Mark, SourceRow, discover

LINE = json.dumps({"messages": [{"role": "user", "content": "hi"}]})


def until_idle(stream):
    """Items up to the next IDLE (marks are committed to nothing here)."""
    out = []
    for item in stream:
        if item is IDLE:
            return out
        out.append(item)
    return out


def lines_of(items):
    return [(os.path.basename(i.source), i.line) for i in items if isinstance(i, SourceRow)]


def commit(ledger, items):
    for item in items:
        if isinstance(item, Mark):
            ledger.advance(item)
    ledger.commit()


def test_a_restart_resumes_after_the_committed_rows(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_text(f"{LINE}\n{LINE}\n")
    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    items = list(input_stream([str(data)], ledger=ledger))
    assert lines_of(items) == [("a.jsonl", 1), ("a.jsonl", 2)]
    commit(ledger, items)
    ledger.close()

    with open(data / "a.jsonl", "a") as fh:
        fh.write(f"{LINE}\n")
    (data / "b.json").write_text(json.dumps([json.loads(LINE)]))
    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    items = list(input_stream([str(data)], ledger=ledger))
    assert lines_of(items) == [("a.jsonl", 3), ("b.json", 1)]
    commit(ledger, items)
    ledger.close()

    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    assert list(input_stream([str(data)], ledger=ledger)) == []
    ledger.close()
    (data / "a.jsonl").write_text(f"{LINE}\n")  # truncated: read again from the start
    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    assert lines_of(input_stream([str(data)], ledger=ledger)) == [("a.jsonl", 1)]
    ledger.close()


def test_uncommitted_progress_is_read_again(tmp_path):
    (tmp_path / "a.jsonl").write_text(f"{LINE}\n")
    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    for item in input_stream([str(tmp_path / "a.jsonl")], ledger=ledger):
        if isinstance(item, Mark):
            ledger.advance(item)  # sent, but never acknowledged
    ledger.close()
    ledger = Ledger.for_run(tmp_path / "state", "t", "f")
    assert lines_of(input_stream([str(tmp_path / "a.jsonl")], ledger=ledger)) == [("a.jsonl", 1)]
    ledger.close()


def test_the_files_found_at_start_up_are_read_and_following_finds_new_ones(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_text(f"{LINE}\n")
    files = discover([str(data)])
    (data / "b.jsonl").write_text(f"{LINE}\n")  # after start-up: not in this pass
    assert lines_of(input_stream([str(data)], files=files)) == [("a.jsonl", 1)]
    stop = StopSignal()
    stream = input_stream([str(data)], files=files, follow=True, stop=stop, poll_interval=0.01, settle=0)
    assert lines_of(until_idle(stream)) == [("a.jsonl", 1), ("b.jsonl", 1)]  # the next round looks again
    stop.set()
    assert list(stream) == []


def test_follow_picks_up_appended_lines_and_new_files(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_text(f"{LINE}\n")
    stop = StopSignal()
    stream = input_stream([str(data)], follow=True, stop=stop, poll_interval=0.01, settle=0.3)
    assert lines_of(until_idle(stream)) == [("a.jsonl", 1)]
    with open(data / "a.jsonl", "a") as fh:
        fh.write(f"{LINE}\n{LINE[:5]}")  # a complete line and the start of another
    (data / "b.jsonl").write_text(f"{LINE}\n")
    (data / "c.json").write_text(json.dumps([json.loads(LINE)] * 2))
    got = lines_of(until_idle(stream))
    assert ("a.jsonl", 2) in got and ("b.jsonl", 1) in got and ("a.jsonl", 3) not in got
    time.sleep(0.35)  # quiet files: the partial line and the whole JSON file are read now
    got = lines_of(until_idle(stream))
    assert sorted(got) == [("a.jsonl", 3), ("c.json", 1), ("c.json", 2)]
    assert lines_of(until_idle(stream)) == []
    stop.set()
    assert list(stream) == []


def test_one_ledger_per_producer(tmp_path):
    first = Ledger.for_run(tmp_path, "t", "f")
    with pytest.raises(ConfigError, match="another producer"):
        Ledger.for_run(tmp_path, "t", "f")
    first.close()
    (tmp_path / "u.f.ledger.json").write_text("[]")
    with pytest.raises(ConfigError, match="not a progress ledger"):
        Ledger.for_run(tmp_path, "u", "f")


def test_following_a_file_rewritten_in_place_reads_it_again_from_the_start(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(f"{LINE}\n" * 3)
    stop = StopSignal()
    stream = input_stream([str(path)], follow=True, stop=stop, poll_interval=0.01, settle=0)
    assert len(lines_of(until_idle(stream))) == 3
    inode = path.stat().st_ino
    longer = json.dumps({"messages": [{"role": "user", "content": "a longer question"}]})
    with open(path, "r+") as fh:  # as `cp new.jsonl a.jsonl` does: same inode, larger file
        fh.write(f"{longer}\n" * 5)
    assert path.stat().st_ino == inode
    assert lines_of(until_idle(stream)) == [("a.jsonl", n) for n in range(1, 6)]
    stop.set()
    assert list(stream) == []
