"""A dataset has one model (issue 36): prompts record the model they are for (PromptRecord v3), and a
worker refuses a server of another, stopping in one line, before any row, when no server is left."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import PROMPT
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import dead_letters, generations, read_topic

pytestmark = pytest.mark.kafka

MODEL = "Qwen/Qwen3-8B"


def produce(kafka: KafkaConfig, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
                              for i in range(4)))
    return run_cli("produce", str(inputs), *kafka_flags(kafka), "--tokenizer", str(TOKENIZER_DIR),
                   "--workers", "0", "--partitions", "2", "--restart", "--max-new-tokens", "16", *flags)


def generate(kafka: KafkaConfig, *urls: str) -> subprocess.CompletedProcess[str]:
    flags = [arg for url in urls for arg in ("--sglang-url", url)]
    return run_cli("generate", *flags, *kafka_flags(kafka), "--exit-when-idle", "4",
                   "--commit-interval", "0.2", timeout=180)


def errors(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if " ERROR " in line]


def test_a_server_of_another_model_stops_the_worker_in_one_line_and_a_restart_resumes(
        kafka_config, standin_factory, tmp_path):
    produced = produce(kafka_config, tmp_path, "--model", MODEL)
    assert produced.returncode == 0, produced.stderr
    assert {PROMPT.decode(r.value)["model"] for r in read_topic(kafka_config, kafka_config.prompts_topic)} \
        == {MODEL}
    other = standin_factory("--latency-model", "none", "--model-path", "/models/Llama-3.1-8B")

    failed = generate(kafka_config, other)
    assert failed.returncode == 1
    assert len(errors(failed)) == 1 and "Traceback" not in failed.stderr, failed.stderr
    line = errors(failed)[0]
    assert (f"no server serves {MODEL}, the model the prompts were produced for ({other} serves "
            f"/models/Llama-3.1-8B): point the worker (--sglang-url) at a server of {MODEL}") in line, line
    assert "eaglefeed produce --model /models/Llama-3.1-8B" in line and "nothing was dead-lettered" in line
    assert dead_letters(kafka_config) == [] and generations(kafka_config) == []

    # a local path that names the model (another case) is the prompts' model: every prompt is generated
    same = standin_factory("--latency-model", "none", "--output-len-mean", "8",
                           "--model-path", "/models/qwen3-8b")
    run = generate(kafka_config, same)
    assert run.returncode == 0, run.stderr
    assert len(generations(kafka_config)) == 4 and dead_letters(kafka_config) == []


def test_the_server_of_another_model_is_refused_and_the_other_writes_every_row(
        kafka_config, standin_factory, tmp_path):
    produced = produce(kafka_config, tmp_path, "--model", MODEL)
    assert produced.returncode == 0, produced.stderr
    good = standin_factory("--latency-model", "none", "--output-len-mean", "8", "--model-path", MODEL)
    bad = standin_factory("--latency-model", "none", "--model-path", "meta-llama/Llama-3.1-8B")

    run = generate(kafka_config, good, bad)
    assert run.returncode == 0, run.stderr
    assert len(errors(run)) == 1 and bad in errors(run)[0] and "meta-llama/Llama-3.1-8B" in errors(run)[0]
    rows = generations(kafka_config)
    assert len(rows) == 4 and {g["endpoint"] for _r, g in rows} == {good}
    assert dead_letters(kafka_config) == []


def test_prompts_of_an_unknown_model_go_to_any_server(kafka_config, standin_factory, tmp_path):
    # the demo tokenizer is a tokenizer alone (no config.json beside it): it names no model
    produced = produce(kafka_config, tmp_path)
    assert produced.returncode == 0, produced.stderr
    assert {PROMPT.decode(r.value)["model"] for r in read_topic(kafka_config, kafka_config.prompts_topic)} \
        == {None}
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8",
                          "--model-path", "/models/Other")
    run = generate(kafka_config, url)
    assert run.returncode == 0, run.stderr
    assert "the prompts name no model" in run.stderr
    assert len(generations(kafka_config)) == 4


def test_the_producer_refuses_prompts_for_another_model_into_the_prefix(kafka_config, tmp_path):
    first = produce(kafka_config, tmp_path, "--model", MODEL)
    assert first.returncode == 0, first.stderr
    refused = produce(kafka_config, tmp_path, "--model", "/models/Llama-3.1-8B")
    assert refused.returncode == 1, refused.stderr
    assert len(errors(refused)) == 1, refused.stderr
    assert f"{kafka_config.prompts_topic} holds prompts of another model: " in errors(refused)[0]
    assert f"model {MODEL})" in errors(refused)[0] and "model /models/Llama-3.1-8B)" in errors(refused)[0]
    assert "One topic prefix makes one dataset of one model" in errors(refused)[0]
    again = produce(kafka_config, tmp_path, "--model", "/models/Qwen3-8B")  # the same model, as a path
    assert again.returncode == 0, again.stderr
