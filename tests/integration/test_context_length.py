"""Issue 36, trip 7: a prompt too long for the server is found before it is sent; produce warns at start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import DEAD_LETTER, GENERATION, PROMPT
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka


def row(text: str) -> str:
    return json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    return {**keep, "EAGLEFEED_CACHE_DIR": str(tmp_path / "cache")}


def produce(kafka: KafkaConfig, path: Path, env: dict[str, str], *flags: str,
            tokenizer: Path = TOKENIZER_DIR) -> subprocess.CompletedProcess[str]:
    done = run_cli("produce", str(path), *kafka_flags(kafka), "--tokenizer", str(tokenizer), "--workers", "0",
                   "--partitions", "2", "--no-progress", *flags, env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_a_prompt_too_long_for_the_servers_context_is_dead_lettered_before_it_is_sent(
        kafka_config, standin_factory, tmp_path, env):
    """The walkthrough's 7,148 + 2,048 > 8,192, scaled down: context_exceeded naming both, not http_400."""
    path = tmp_path / "prompts.jsonl"
    path.write_text(row("a short question") + row(" ".join(f"word{i}" for i in range(55))))
    produce(kafka_config, path, env, "--max-new-tokens", "64")
    lengths = {p["source_row"]: len(p["input_ids"]) for p in
               (PROMPT.decode(r.value) for r in read_topic(kafka_config, kafka_config.prompts_topic))}
    assert lengths["1"] + 64 <= 256 < lengths["2"] + 64 and lengths["2"] < 256  # the prompt alone fits
    url = standin_factory("--latency-model", "none", "--context-length", "256", "--output-len-mean", "4")

    done = run_cli("generate", "--sglang-url", url, *kafka_flags(kafka_config), "--exit-when-idle", "3",
                   env=env)

    assert done.returncode == 0, done.stderr
    (letter,) = [DEAD_LETTER.decode(r.value)
                 for r in read_topic(kafka_config, kafka_config.dead_letter_topic)]
    assert (letter["stage"], letter["error_kind"], letter["line"]) == ("generate", "context_exceeded", 2)
    assert (f"prompt {lengths['2']} tokens + max_new_tokens 64 = {lengths['2'] + 64} exceeds the context "
            f"length of {url} (256 tokens); not sent") in letter["message"]
    assert [GENERATION.decode(r.value)["source_row"]
            for r in read_topic(kafka_config, kafka_config.generations_topic)] == ["1"]
    summary = run_cli("dead-letters", *kafka_flags(kafka_config), "--summary", env=env).stdout.splitlines()
    assert summary[1].split() == ["1", "1", "0", "generate", "context_exceeded"]


def test_produce_warns_once_when_prompt_and_output_exceed_the_models_positions(kafka_config, tmp_path, env):
    path = tmp_path / "prompts.jsonl"
    path.write_text(row("hello"))
    quiet = produce(kafka_config, path, env)  # the bundled tokenizer has no config.json: nothing is said
    assert "max_position_embeddings" not in quiet.stderr
    model = tmp_path / "model"
    shutil.copytree(TOKENIZER_DIR, model)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 8192}))

    done = produce(kafka_config, path, env, tokenizer=model)

    warned = [line for line in done.stderr.splitlines() if "max_position_embeddings" in line]
    assert len(warned) == 1, done.stderr
    assert ("--max-prompt-tokens 32768 + max_new_tokens 2048 = 34816 exceeds the model's "
            f"max_position_embeddings 8192 ({model / 'config.json'})") in warned[0]
    assert "--max-prompt-tokens 6144 refuses it here" in warned[0]
    fits = produce(kafka_config, path, env, "--max-prompt-tokens", "6144", tokenizer=model)
    assert "max_position_embeddings" not in fits.stderr
