"""Work already done is never paid for twice (issue 36): ``produce --samples 2`` after ``--samples 1``
publishes the same prompts again, and the worker generates only their sample 1, not sample 0 again."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import eaglefeed
from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import generations

pytestmark = pytest.mark.kafka

ROWS = 6


def run(kafka, command: str, *flags: str) -> str:
    done = run_cli(command, *flags, *kafka_flags(kafka), timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_more_samples_of_prompts_done_generate_only_the_new_samples(kafka_config, standin_factory, tmp_path):
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
                              for i in range(ROWS)))
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8")
    produce = ("produce", str(inputs), "--tokenizer", str(TOKENIZER_DIR), "--workers", "0",
               "--state-dir", str(tmp_path / "state"), "--max-new-tokens", "16")
    generate = ("generate", "--sglang-url", url, "--exit-when-idle", "3", "--commit-interval", "0.2")

    run(kafka_config, *produce, "--samples", "1")
    run(kafka_config, *generate)
    run(kafka_config, *produce, "--samples", "2")  # another ledger key: every row is published again
    said = run(kafka_config, *generate)

    ids = Counter(g["id"] for _r, g in generations(kafka_config))
    assert len(ids) == 2 * ROWS and set(ids.values()) == {1}, ids  # the GPU paid for each sample once
    assert f"generated only the missing samples of {ROWS} prompts" in said, said
    run(kafka_config, "sink", "--output", str(tmp_path / "ds"), "--exit-when-idle", "3",
        "--flush-seconds", "0.5")
    table = eaglefeed.load(tmp_path / "ds")
    assert table.num_rows == 2 * ROWS
    assert Counter(table.column("sample_index").to_pylist()) == {0: ROWS, 1: ROWS}

