"""Issue 36, trip 6: one open dead letter per bad input line, and every letter names its input line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import DEAD_LETTER
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka


def row(text: str, **extra: object) -> str:
    return json.dumps({"messages": [{"role": "user", "content": text}], **extra}) + "\n"


BAD = {  # line index → a bad line and its reason
    2: ('{"messages": [{"role": "user", "content": "oops"}\n', "invalid_json"),
    4: ('{"prompt": "no messages"}\n', "no_messages"),
    6: ('[1, 2, 3]\n', "wrong_type"),
    8: ('{"messages": [{"role": "wizard", "content": "hi"}]}\n', "unknown_role"),
    10: ('{"messages": [{"role": "user", "content": "cut"\n', "invalid_json"),
    12: ('"just a string"\n', "wrong_type"),
    14: ('{"conversations": 7}\n', "wrong_type"),
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment as a user has it: the default ledger (under the cache), no state dir."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    return {**keep, "EAGLEFEED_CACHE_DIR": str(tmp_path / "cache")}


def produce(kafka: KafkaConfig, path: Path, env: dict[str, str], *flags: str) -> str:
    done = run_cli("produce", str(path), *kafka_flags(kafka), "--tokenizer", str(TOKENIZER_DIR),
                   "--workers", "0", "--partitions", "2", "--no-progress", *flags, env=env)
    assert done.returncode == 0, done.stderr
    (summary,) = [line for line in done.stdout.splitlines() if line.startswith("read ")]
    return summary


def summary_rows(kafka: KafkaConfig, env: dict[str, str]) -> dict[str, list[int]]:
    """``dead-letters --summary --json``: reason → [all, open, resolved] of the produce letters."""
    done = run_cli("dead-letters", *kafka_flags(kafka), "--summary", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return {r["reason"]: [r["count"], r["open"], r["resolved"]] for r in json.loads(done.stdout)
            if r["stage"] == "produce"}


def test_a_line_still_bad_after_reruns_keeps_one_open_letter(kafka_config, tmp_path, env):
    """The walkthrough: 7 bad lines, 3 fixed, produce again (and once more from the start): 4 open for 4."""
    lines = [row(f"question {i}") for i in range(16)]
    for index, (text, _reason) in BAD.items():
        lines[index] = text
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(lines))
    assert "dead-lettered 7" in produce(kafka_config, path, env)
    for index in (2, 6, 8):
        lines[index] = row(f"question {index}, fixed")
    path.write_text("".join(lines))

    second = produce(kafka_config, path, env)
    third = produce(kafka_config, path, env, "--restart")  # every line read once more

    for out in (second, third):
        assert "dead-lettered 0" in out and "4 bad lines already dead-lettered" in out, out
    assert "fixed 3 lines dead-lettered before" in second
    letters = [DEAD_LETTER.decode(r.value) for r in read_topic(kafka_config, kafka_config.dead_letter_topic)]
    assert len(letters) == 7  # the first run's, no more
    counts = summary_rows(kafka_config, env)
    assert counts == {"invalid_json": [2, 1, 1], "no_messages": [1, 1, 0], "wrong_type": [3, 2, 1],
                      "unknown_role": [1, 0, 1]}
    assert sum(c[1] for c in counts.values()) == 4  # 4 open for 4 problems
    # a still-bad line that fails for another reason now is a new problem: it gets a letter of its own
    lines[4] = '{"messages": "not a list"}\n'
    path.write_text("".join(lines))
    assert "dead-lettered 1 (wrong_type=1)" in produce(kafka_config, path, env)


def test_a_worker_dead_letter_names_the_prompts_input_file_and_line(kafka_config, standin_factory,
                                                                    tmp_path, env):
    """A prompt the server cannot take: its letter names ``source`` and ``line``, as a produce letter does."""
    path = tmp_path / "prompts.jsonl"
    long = " ".join(f"word{i}" for i in range(200))
    path.write_text(row("short") + row(long) + row("short too") + row(long + " again", id="own-id"))
    produce(kafka_config, path, env, "--max-new-tokens", "8")
    url = standin_factory("--latency-model", "none", "--context-length", "96", "--output-len-mean", "4")

    done = run_cli("generate", "--sglang-url", url, *kafka_flags(kafka_config), "--exit-when-idle", "3",
                   "--max-attempts", "1", env=env)

    assert done.returncode == 0, done.stderr
    letters = [DEAD_LETTER.decode(r.value) for r in read_topic(kafka_config, kafka_config.dead_letter_topic)]
    assert sorted(((d["stage"], d["source"], d["line"]) for d in letters), key=str) == [
        ("generate", str(path), 2), ("generate", str(path), None)]  # a row with its own id: the file
    listed = run_cli("dead-letters", *kafka_flags(kafka_config), env=env).stdout.splitlines()
    assert sum(f" from {path}:2: " in line for line in listed) == 1
    as_json = [json.loads(line) for line in run_cli("dead-letters", *kafka_flags(kafka_config), "--json",
                                                    env=env).stdout.splitlines()]
    assert sorted((r["source"], r["line"]) for r in as_json if r["line"]) == [(str(path), 2)]
