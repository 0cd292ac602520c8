"""A server with another tokenizer than the prompts' is refused; none agreeing stops the worker (issue 24)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from eaglefeed.consumers.generate.tokens import PROBES, load_local
from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli
from tests.factories import make_prompt
from tests.integration.worker_support import dead_letters, generations, publish_prompts

pytestmark = pytest.mark.kafka


def swapped_tokenizer(tmp_path: Path) -> Path:
    """A copy of the demo tokenizer with the ids of two tokens of the plain probe swapped."""
    target = tmp_path / "swapped-tokenizer"
    shutil.copytree(TOKENIZER_DIR, target)
    first, second = load_local(str(TOKENIZER_DIR), trust_remote_code=False).encode(PROBES[0])[:2]
    spec = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    names = {i: token for token, i in vocab.items()}
    vocab[names[first]], vocab[names[second]] = second, first
    (target / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return target


def generate(kafka, *urls):
    flags = [arg for url in urls for arg in ("--sglang-url", url)]
    return run_cli("generate", *flags, *kafka_flags(kafka), "--exit-when-idle", "4",
                   "--commit-interval", "0.2", timeout=180)


def test_the_standin_tokenizes_as_sglang_does(standin_factory, tmp_path):
    url = standin_factory("--latency-model", "none")
    expected = load_local(str(TOKENIZER_DIR), trust_remote_code=False).encode(PROBES[1])
    one = httpx.post(f"{url}/tokenize", json={"prompt": PROBES[1], "add_special_tokens": False}).json()
    assert one == {"tokens": expected, "count": len(expected), "max_model_len": one["max_model_len"]}
    batch = httpx.post(f"{url}/v1/tokenize", json={"prompt": ["<think>", "a"], "add_special_tokens": False})
    assert batch.json()["count"] == [1, 1]
    refused = httpx.post(f"{url}/tokenize", json={"add_special_tokens": False})
    assert refused.status_code == 400 and "Exactly one of 'prompt' or 'messages'" in refused.json()["message"]


def test_a_server_with_another_tokenizer_stops_the_worker_in_one_line_before_any_row(
        kafka_config, standin_factory, tmp_path):
    publish_prompts(kafka_config, [make_prompt(i) for i in range(3)], partitions=1)
    url = standin_factory("--latency-model", "none", "--tokenizer", str(swapped_tokenizer(tmp_path)))

    failed = generate(kafka_config, url)
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert url in errors[0] and str(TOKENIZER_DIR) in errors[0] and "probe" in errors[0]
    # what to fix, never a way around the check (issue 36: skipping it sent every prompt to dead letters)
    assert "point the worker (--sglang-url) at a server that serves the prompts' model" in errors[0], errors
    assert "produce the prompts again with the server's tokenizer" in errors[0], errors
    assert "skip" not in errors[0] and "--vocab-size" not in errors[0], errors
    assert dead_letters(kafka_config) == [] and generations(kafka_config) == []


def test_the_disagreeing_server_is_refused_and_the_agreeing_one_writes_every_row(
        kafka_config, standin_factory, tmp_path):
    prompts = [make_prompt(i) for i in range(6)]
    publish_prompts(kafka_config, prompts, partitions=1)
    good = standin_factory("--latency-model", "none", "--output-len-mean", "8")
    bad = standin_factory("--latency-model", "none", "--tokenizer", str(swapped_tokenizer(tmp_path)))

    run = generate(kafka_config, good, bad)
    assert run.returncode == 0, run.stderr
    errors = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and bad in errors[0] and good not in errors[0], run.stderr
    rows = generations(kafka_config)
    assert sorted(g["prompt_id"] for _r, g in rows) == sorted(p["prompt_id"] for p in prompts)
    assert {g["endpoint"] for _r, g in rows} == {good}
    assert dead_letters(kafka_config) == []
