"""An input edited between runs loses no row, and the ledger is found from any working directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import DEAD_LETTER, PROMPT
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka
ROWS = 2000


def row(text: str) -> str:
    return json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n"


@pytest.fixture
def produce(kafka_config: KafkaConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """``eaglefeed produce PATH`` as a user runs it (no --state-dir) from ``cwd``; returns its summary."""
    monkeypatch.setattr(StopSignal, "install", lambda self: self)
    monkeypatch.delenv("EAGLEFEED_STATE_DIR", raising=False)
    monkeypatch.delenv("EAGLEFEED_PRODUCER_STATE_DIR", raising=False)
    monkeypatch.delenv("EAGLEFEED_PRODUCE_STATE_DIR", raising=False)
    monkeypatch.setenv("EAGLEFEED_CACHE_DIR", str(tmp_path / "cache"))  # the default ledger's home

    def run(path: Path, *, cwd: Path) -> str:
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        argv = ["produce", str(path), "--bootstrap-servers", kafka_config.bootstrap_servers,
                "--topic-prefix", kafka_config.topic_prefix, "--workers", "0", "--partitions", "2",
                "--tokenizer", str(TOKENIZER_DIR)]
        assert main(argv) == 0
        return str(capsys.readouterr().out)

    return run


def dead_letters(kafka: KafkaConfig, capsys, *flags: str) -> list[str]:
    """``eaglefeed dead-letters`` with ``flags``: its output lines."""
    assert main(["dead-letters", "--bootstrap-servers", kafka.bootstrap_servers,
                 "--topic-prefix", kafka.topic_prefix, *flags]) == 0
    return str(capsys.readouterr().out).splitlines()


def prompts(kafka: KafkaConfig) -> list[dict]:
    return [PROMPT.decode(r.value) for r in read_topic(kafka, kafka.prompts_topic)]


def test_a_larger_rewrite_copied_over_the_input_publishes_every_row_of_the_new_content(
        kafka_config, tmp_path, produce):
    """The issue's case: ``cp new.jsonl prompts.jsonl`` (same inode, larger), then produce again."""
    path, new = tmp_path / "prompts.jsonl", tmp_path / "new.jsonl"
    path.write_text("".join(row(f"question {i}") for i in range(ROWS)))
    assert f"published {ROWS} prompts" in produce(path, cwd=tmp_path)
    new.write_text("".join(row(f"a rewritten, longer question {i}") for i in range(ROWS)))
    inode = path.stat().st_ino
    shutil.copyfile(new, path)  # what cp does to an existing file: same inode, new bytes
    assert path.stat().st_ino == inode

    out = produce(path, cwd=tmp_path)

    assert f"published {ROWS} prompts" in out and "dead-lettered 0" in out
    records = prompts(kafka_config)
    assert len({r["prompt_id"] for r in records}) == 2 * ROWS  # every new row is a prompt of its own
    assert sorted(int(r["source_row"]) for r in records) == sorted([*range(1, ROWS + 1)] * 2)
    assert read_topic(kafka_config, kafka_config.dead_letter_topic) == []
    assert "published 0 prompts" in produce(path, cwd=tmp_path)  # and it resumes at the new end


def test_a_line_fixed_after_its_dead_letter_is_published_by_the_next_run(kafka_config, tmp_path, produce,
                                                                        capsys):
    """README and docs/RELIABILITY.md: "fix the line and run produce again"; its letter then reads fixed."""
    path = tmp_path / "prompts.jsonl"
    lines = [row(f"question {i}") for i in range(10)]
    lines[3] = '{"messages": [{"role": "user", "content": "oops"}\n'
    path.write_text("".join(lines))
    assert "dead-lettered 1" in produce(path, cwd=tmp_path)
    letters = read_topic(kafka_config, kafka_config.dead_letter_topic)
    (letter,) = [DEAD_LETTER.decode(r.value) for r in letters]
    assert (letter["error_kind"], letter["line"]) == ("invalid_json", 4)
    assert dead_letters(kafka_config, capsys)[-1].endswith("(1 open, 0 re-driven)")
    lines[3] = row("question 3, fixed")
    path.write_text("".join(lines))  # the editor's way or in place: either reads the file again

    out = produce(Path("prompts.jsonl"), cwd=tmp_path)  # named relative this time: the same source

    # The file is read again: the nine published rows again (the same ids, deduplicated by the
    # workers and the sink) and the fixed row for the first time.
    assert "published 10 prompts" in out and "dead-lettered 0" in out
    assert "fixed 1 lines dead-lettered before" in out
    records = prompts(kafka_config)
    assert len(records) == 19 and len({r["prompt_id"] for r in records}) == 10
    assert [r["source_row"] for r in records].count("4") == 1
    (fixed,) = [r["prompt_id"] for r in records if r["source_row"] == "4"]
    # ... and the letter reads as resolved: listed, counted, and left alone by a re-drive
    listed = dead_letters(kafka_config, capsys)
    assert listed[-1] == f"1 dead letters in {kafka_config.dead_letter_topic} (0 open, 0 re-driven, 1 fixed)"
    assert f"{path}:4: line is not valid JSON" in listed[0]
    assert f"[fixed: published as prompt {fixed} at " in listed[0]
    summary = dead_letters(kafka_config, capsys, "--summary")
    assert summary[1].split() == ["1", "0", "1", "produce", "invalid_json"]
    (as_json,) = [json.loads(line) for line in dead_letters(kafka_config, capsys, "--json")]
    assert as_json["fixed_prompt_id"] == fixed
    assert dead_letters(kafka_config, capsys, "--redrive", "--stage", "produce") == [
        "re-drove 0 records from 1 dead letters (0 not re-drivable, 1 fixed since (published by produce))"]
    assert "published 0 prompts" in produce(path, cwd=tmp_path)  # resumes at the end: no second marker
    assert len(read_topic(kafka_config, kafka_config.redriven_topic)) == 1


def test_the_same_command_from_another_directory_resumes(kafka_config, tmp_path, produce):
    path = tmp_path / "data" / "prompts.jsonl"
    path.parent.mkdir()
    path.write_text("".join(row(f"question {i}") for i in range(20)))
    assert "published 20 prompts" in produce(path, cwd=tmp_path / "here")
    assert "published 0 prompts" in produce(path, cwd=tmp_path / "elsewhere")
    assert list((tmp_path / "cache" / "produce").glob("*.ledger.json"))
    assert not (tmp_path / "here" / ".eaglefeed").exists()
    assert len(prompts(kafka_config)) == 20
