"""Fault injection: every prompt sample ends as a correct generation or a dead letter with a reason."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.generate import run_worker
from eaglefeed.core.config import WorkerConfig
from eaglefeed.schemas import PROMPT
from tests.factories import make_prompt
from tests.integration.worker_support import dead_letters, generations, publish

pytestmark = pytest.mark.kafka

FAULTS = ["--fault-503-rate", "0.1", "--fault-500-rate", "0.05", "--fault-reset-rate", "0.1",
          "--fault-abort-rate", "0.1", "--fault-contaminate-rate", "0.15", "--fault-hang-rate", "0.04",
          "--fault-hang-seconds", "30", "--fault-seed", "7"]


@pytest.mark.parametrize("mode", ["separate", "n"])
def test_faults_end_as_generations_or_dead_letters(kafka_config, standin_factory, mode):
    url = standin_factory("--latency-model", "none", "--output-len-mean", "24", "--api-key", "sk-test",
                          *FAULTS)
    prompts = [make_prompt(i, samples=2) for i in range(30)]
    too_long = make_prompt(100, length=9000)  # over the stand-in's 8192-token context: never sent
    values = [PROMPT.encode(p) for p in [*prompts, too_long]] + [b"\x00poison"]
    placed = publish(kafka_config, values, partitions=3)
    registry = CollectorRegistry()
    finished = run_worker(WorkerConfig(
        kafka=kafka_config, sglang_urls=(url,), api_key="sk-test", concurrency=16, samples_mode=mode,
        max_attempts=6,
        retry_backoff=0.02, retry_backoff_max=0.2, request_timeout=1.0, probe_interval=0.2,
        commit_interval=0.2, exit_when_idle=2), registry=registry)
    assert finished == len(values)

    gens = generations(kafka_config)
    letters = dead_letters(kafka_config)
    sample_ids = {f"{p['prompt_id']}:{i}" for p in prompts for i in range(2)}
    gen_ids = [g["id"] for _r, g in gens]
    letter_ids = [d["record_id"] for d in letters if d["record_id"] in sample_ids]
    # every sample ended exactly once, one way or the other, and the counts add up
    assert sorted(gen_ids + letter_ids) == sorted(sample_ids)
    assert len(gen_ids) + len(letter_ids) == 60 and len(gen_ids) >= 40
    for letter in letters:
        assert letter["error_kind"] and letter["message"] and letter["stage"] == "generate"
        assert placed[(letter["partition"], letter["offset"])] == letter["value"]
    by_kind = {d["error_kind"]: d for d in letters if d["record_id"] not in sample_ids}
    assert set(by_kind) == {"context_exceeded", "undecodable_prompt"}
    assert "exceeds the context length of" in by_kind["context_exceeded"]["message"]
    assert by_kind["undecodable_prompt"]["value"] == b"\x00poison"

    by_prompt = {p["prompt_id"]: p for p in prompts}
    for _r, g in gens:  # nothing contaminated, truncated or aborted reached the training data
        prompt = by_prompt[g["prompt_id"]]
        assert g["prompt_ids"] == prompt["input_ids"] and g["prompt_tokens"] == len(prompt["input_ids"])
        assert g["completion_tokens"] == len(g["output_ids"]) > 0
        assert g["finish_reason"] in ("stop", "length") and max(g["output_ids"]) < 4096
        assert g["output_ids"][:5] != prompt["input_ids"][-5:]
        if g["finish_reason"] == "stop":
            assert g["output_ids"][-1] == int(g["matched_stop"])
    retries = {s.labels["reason"]: s.value for m in registry.collect() if m.name == "eaglefeed_worker_retries"
               for s in m.samples if s.name.endswith("_total")}
    assert {"integrity", "abort", "http_503", "timeout"} <= set(retries)
