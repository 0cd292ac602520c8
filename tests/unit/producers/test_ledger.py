"""The progress ledger: keyed by inputs and prompt settings, --restart, unwritable state dirs, and
resuming only where an input still starts with the bytes it was read from."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil

import pytest

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults
from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.follow import input_stream
from eaglefeed.producers.ledger import Ledger, open_ledger, run_fingerprint
from eaglefeed.producers.position import Position, verify
from eaglefeed.producers.sources import MARK_EVERY, Mark, SourceRow

SETTINGS = {"tokenizer": "/tok", "sampling": {"temperature": 0.6}, "samples": 1}


def fingerprint(**changes):
    args = {"inputs": ["a.jsonl"], "bootstrap_servers": "h:9092", "settings": SETTINGS, "overrides": {}}
    return run_fingerprint(**{**args, **changes})


def test_the_fingerprint_changes_with_anything_that_changes_a_prompt():
    same = fingerprint()
    assert fingerprint() == same
    changed = [fingerprint(inputs=["b.jsonl"]), fingerprint(bootstrap_servers="other:9092"),
               fingerprint(settings={**SETTINGS, "tokenizer": "/other"}),
               fingerprint(settings={**SETTINGS, "sampling": {"temperature": 0.7}}),
               fingerprint(overrides={"/a.jsonl": "[{}, {\"enable_thinking\": false}]"})]
    assert same not in changed and len(set(changed)) == len(changed)


def test_a_ledger_resumes_only_with_the_same_fingerprint_and_restart_forgets(tmp_path):
    ledger = Ledger.for_run(tmp_path, "t", "f1")
    ledger.advance(Mark("/a.jsonl", Position(10, 2, "ab"), 10))
    ledger.commit()
    ledger.close()
    again = Ledger.for_run(tmp_path, "t", "f1")
    assert again.get("/a.jsonl") == Position(10, 2, "ab")
    again.close()
    other = Ledger.for_run(tmp_path, "t", "f2")
    assert other.get("/a.jsonl") is None
    other.close()
    fresh = Ledger.for_run(tmp_path, "t", "f1", restart=True)
    assert fresh.get("/a.jsonl") is None and fresh.positions() == {}
    fresh.close()


def test_an_unwritable_state_dir_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a folder cannot be made inside a file, even by root
    with pytest.raises(ConfigError, match="cannot keep the progress ledger in .*--state-dir"):
        Ledger.for_run(blocker / "state", "t", "f")



# The sampling defaults of these names (issue 27 made the defaults neutral; these settings still name
# the same ledgers).
QWEN = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}


@pytest.mark.parametrize(("prompts", "name"), [
    ({"sampling": SamplingDefaults(**QWEN)}, "t.f9cc5ac2a59afd5a.ledger.json"),
    ({"turns": "all", "sampling": SamplingDefaults(**QWEN)}, "t.a0e2b9f67f937d03.ledger.json"),
    ({"history": "rerender", "max_turns": 4, "samples": 3, "max_prompt_tokens": 100,
      "sampling": SamplingDefaults(**{**QWEN, "top_k": 5}, stop_token_ids=(7,)),
      "chat_template_kwargs": {"enable_thinking": False}}, "t.b528565e648256b4.ledger.json"),
])
def test_the_ledger_of_the_same_run_keeps_its_name(prompts, name, tmp_path):
    """A ledger on disk is found again only under the same name: these names must never change."""
    cfg = ProducerConfig(kafka=KafkaConfig(topic_prefix="t"), inputs=("/nonexistent/in.jsonl",),
                         prompts=PromptSettings(tokenizer="tok", **prompts), follow=True, state_dir=tmp_path)
    ledger = open_ledger(cfg, files=[])
    assert ledger is not None and ledger.path.name == name
    ledger.close()


def row(i: int, text: str = "question") -> str:
    return json.dumps({"messages": [{"role": "user", "content": f"{text} {i}"}]}) + "\n"


def read_and_commit(tmp_path, path, *, fingerprint="f"):
    """One produce pass over ``path`` with every mark acknowledged: the line numbers and raw rows read."""
    ledger = Ledger.for_run(tmp_path / "state", "t", fingerprint)
    try:
        items = list(input_stream([str(path)], ledger=ledger))
        for item in items:
            if isinstance(item, Mark):
                ledger.advance(item)
        ledger.commit()
    finally:
        ledger.close()
    return [(i.line, i.raw) for i in items if isinstance(i, SourceRow)]


def test_a_position_saves_the_sha256_of_the_bytes_before_it(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(row(i) for i in range(MARK_EVERY + 3)))
    read_and_commit(tmp_path, path)
    saved = json.loads(next((tmp_path / "state").glob("*.ledger.json")).read_text())
    assert saved["version"] == 2
    pos = Position.from_json(saved["files"][str(path)])
    data = path.read_bytes()
    assert (pos.offset, pos.line, pos.sha256) == (len(data), MARK_EVERY + 3, hashlib.sha256(data).hexdigest())
    hasher = verify(path, pos)
    assert hasher is not None and hasher.hexdigest() == pos.sha256


def test_appended_lines_resume_after_the_unchanged_prefix(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(row(i) for i in range(5)))
    assert len(read_and_commit(tmp_path, path)) == 5
    with open(path, "a") as fh:
        fh.write(row(5) + row(6))
    assert [line for line, _ in read_and_commit(tmp_path, path)] == [6, 7]
    assert read_and_commit(tmp_path, path) == []


def test_a_larger_rewrite_in_place_is_read_again_from_the_start(tmp_path):
    """The issue's case: ``cp new.jsonl prompts.jsonl`` (same inode, larger file) loses no row."""
    path, new = tmp_path / "prompts.jsonl", tmp_path / "new.jsonl"
    path.write_text("".join(row(i, "old") for i in range(2000)))
    read_and_commit(tmp_path, path)
    inode = path.stat().st_ino
    new.write_text("".join(row(i, "a longer new question") for i in range(2000)))
    shutil.copyfile(new, path)  # cp: truncates and writes the same inode
    assert path.stat().st_ino == inode and path.stat().st_size > len(row(0, "old")) * 2000
    got = read_and_commit(tmp_path, path)
    assert got == [(n, raw.rstrip(b"\n")) for n, raw in enumerate(new.read_bytes().splitlines(True), start=1)]
    assert read_and_commit(tmp_path, path) == []  # and then it resumes at the end of the new content


def test_a_line_fixed_in_place_is_read_again_so_the_fixed_row_is_published(tmp_path, caplog):
    """README: "fix the line and run produce again" — the edit is in the consumed prefix."""
    path = tmp_path / "in.jsonl"
    lines = [row(i) for i in range(10)]
    lines[3] = '{"messages": [\n'
    path.write_text("".join(lines))
    read_and_commit(tmp_path, path)
    lines[3] = row(3)
    with open(path, "r+") as fh:  # edited in place: same inode, a size of its own
        fh.write("".join(lines))
        fh.truncate()
    with caplog.at_level(logging.WARNING):
        got = read_and_commit(tmp_path, path)
    assert (4, row(3).rstrip("\n").encode()) in got and len(got) == 10
    assert "changed since the run that read its first 10 lines" in caplog.text


def test_a_same_size_edit_is_caught_by_the_hash_not_by_inode_or_size(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(row(1) + row(2))
    read_and_commit(tmp_path, path)
    stat = path.stat()
    path.write_text(row(1) + row(3))  # same length, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [line for line, _ in read_and_commit(tmp_path, path)] == [1, 2]


def test_a_whole_file_is_read_again_when_its_bytes_change_and_not_when_touched(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps([{"messages": [{"role": "user", "content": "a"}]}]))
    assert len(read_and_commit(tmp_path, path)) == 1
    os.utime(path)  # touched, not changed
    assert read_and_commit(tmp_path, path) == []
    path.write_text(json.dumps([{"messages": [{"role": "user", "content": "b"}]}]))  # same size
    assert len(read_and_commit(tmp_path, path)) == 1


def test_a_version_1_ledger_is_read_again_with_a_warning(tmp_path, caplog):
    (tmp_path / "t.f.ledger.json").write_text(json.dumps(
        {"version": 1, "files": {"/a.jsonl": {"offset": 10, "line": 2, "inode": 1}}}))
    with caplog.at_level(logging.WARNING):
        ledger = Ledger.for_run(tmp_path, "t", "f")
    assert ledger.positions() == {} and "older eaglefeed" in caplog.text
    ledger.close()
    (tmp_path / "t.g.ledger.json").write_text(json.dumps({"version": 2, "files": {"/a": {"offset": 1}}}))
    with pytest.raises(ConfigError, match="not a progress ledger"):
        Ledger.for_run(tmp_path, "t", "g")


def test_a_last_line_read_without_its_newline_is_read_again_when_it_grows(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(row(1) + '{"messages": [{"role": "user", "content": "a"}]}')  # no newline yet
    assert len(read_and_commit(tmp_path, path)) == 2
    assert read_and_commit(tmp_path, path) == []  # unchanged: nothing again
    with open(path, "a") as fh:
        fh.write("\n" + row(3))  # the last line was complete after all; one more row
    assert [line for line, _ in read_and_commit(tmp_path, path)] == [1, 2, 3]
