"""A user's run through the CLI on the real broker: --keep-duplicates keeps every source id (issue 27 item 5),
and generate and sink say how far they got while they run (item 8)."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

import eaglefeed
from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli

pytestmark = pytest.mark.kafka

QUESTIONS = ["What is 2+2?", "Name a prime.", "Say hi."]


def run(command: str, *flags: str, kafka) -> subprocess.CompletedProcess[str]:
    done = run_cli(command, *flags, *kafka_flags(kafka))
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("keep", [False, True])
def test_identical_prompts_of_distinct_ids_reach_the_dataset_only_with_keep_duplicates(
        kafka_config, standin_factory, tmp_path, keep):
    kafka = dataclasses.replace(kafka_config, topic_prefix=f"{kafka_config.topic_prefix}{int(keep)}")
    inputs = tmp_path / "prompts.jsonl"  # 30 rows, 30 ids, 3 distinct prompts
    inputs.write_text("".join(json.dumps({"id": f"src-{i}", "messages": [
        {"role": "user", "content": QUESTIONS[i % 3]}]}) + "\n" for i in range(30)))
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8")
    produced = run("produce", str(inputs), "--tokenizer", str(TOKENIZER_DIR), "--state-dir",
                   str(tmp_path / "state"), *(["--keep-duplicates"] if keep else []), kafka=kafka)
    prompts = 30 if keep else 3
    assert f"published {prompts} prompts" in produced.stdout
    assert ("27 prompts were identical" in produced.stderr) is not keep
    generated = run("generate", "--sglang-url", url, "--exit-when-idle", "3", "--progress-seconds", "0.5",
                    kafka=kafka)
    assert f"generate: finished {prompts} prompts" in generated.stdout
    assert f"generate: {prompts} prompts done, " in generated.stderr and "caught up" in generated.stderr
    out = tmp_path / "dataset"
    sunk = run("sink", "--output", str(out), "--exit-when-idle", "3", "--flush-seconds", "0.5",
               "--progress-seconds", "0.5", kafka=kafka)
    assert f"sink: {prompts} records ({prompts} rows written) done, " in sunk.stderr
    table = eaglefeed.load(out)
    assert table.num_rows == prompts
    source_ids = set(table.column("source_id").to_pylist())
    assert source_ids == ({f"src-{i}" for i in range(30)} if keep else {"src-0", "src-1", "src-2"})
