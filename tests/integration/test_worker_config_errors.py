"""A configuration problem stops the worker with one line; no data becomes a dead letter (issue 18)."""

from __future__ import annotations

import pytest

from tests.cli import kafka_flags, run_cli
from tests.factories import make_prompt
from tests.integration.worker_support import dead_letters, generations, publish_prompts

pytestmark = pytest.mark.kafka


def generate(kafka, url, *flags):
    return run_cli("generate", "--sglang-url", url, *kafka_flags(kafka),
                   "--exit-when-idle", "4", "--commit-interval", "0.2", *flags, timeout=180)


def test_a_tokenizer_the_worker_cannot_load_stops_it_and_a_restart_with_vocab_size_resumes(
        kafka_config, standin_factory):
    prompts = [make_prompt(i, tokenizer="/nonexistent/tokenizer") for i in range(3)]
    publish_prompts(kafka_config, prompts, partitions=1)
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8")

    failed = generate(kafka_config, url)
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert "/nonexistent/tokenizer" in errors[0] and "make it available to the worker" in errors[0]
    assert "--vocab-size" not in errors[0]  # no advice to skip the check the tokenizer is for
    assert dead_letters(kafka_config) == [] and generations(kafka_config) == []

    resumed = generate(kafka_config, url, "--vocab-size", "4096")
    assert resumed.returncode == 0, resumed.stderr
    assert "finished 3 prompts" in resumed.stdout
    generated = sorted(g["prompt_id"] for _r, g in generations(kafka_config))
    assert generated == sorted(p["prompt_id"] for p in prompts)
    assert dead_letters(kafka_config) == []
