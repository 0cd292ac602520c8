"""A healthy produce → generate → sink run prints only what the user needs (issue 18, noise)."""

from __future__ import annotations

import re

import pytest

from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli

pytestmark = pytest.mark.kafka

NOISE = ("PyTorch was not found", "NotLeaderForPartitionError", "blocking the event loop", "Traceback",
         "Bootstrap", "Connection failed", "TopicPartition(", "committed nothing new")


def test_a_healthy_run_has_no_library_noise_on_stderr(kafka_config, standin_factory, tmp_path):
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(SAMPLE_PROMPTS.read_text().splitlines()[:20]) + "\n")
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8")
    common = kafka_flags(kafka_config)
    runs = {
        "produce": [str(inputs), "--tokenizer", str(TOKENIZER_DIR), "--workers", "2",
                    "--state-dir", str(tmp_path / "state")],
        "generate": ["--sglang-url", url, "--exit-when-idle", "5"],
        "sink": ["--output", str(tmp_path / "out"), "--exit-when-idle", "5", "--flush-seconds", "1"],
    }
    for command, flags in runs.items():
        done = run_cli(command, *flags, *common)
        assert done.returncode == 0, done.stderr
        for noise in NOISE:
            assert noise not in done.stderr, f"{command}: {noise!r} in\n{done.stderr}"
        if command == "generate":  # a clean stop says so in words, with nothing left to commit
            assert re.search(r"stopped: handed back \d+ partitions? \(\S+\.prompts partitions? [\d, ]+\); "
                             r"everything finished was committed\n", done.stderr), done.stderr
    assert "rows" in done.stdout or "20" in done.stdout
