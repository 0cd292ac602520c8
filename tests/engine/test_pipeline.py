"""The whole pipeline on a real vLLM: producer → Kafka → generate worker → Kafka → sink → Parquet.

Every generated id must be exactly what the engine returned and, for greedy requests, what
transformers' own ``generate`` computes on the same model (scripts/engine/greedy_reference.py).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults, WorkerConfig
from eaglefeed.devtools.demo import SAMPLE_PROMPTS
from eaglefeed.producers import run_producer
from tests.engine.conftest import MAX_MODEL_LEN, TOKENIZER_DIR, Reference, VllmServer
from tests.engine.pipeline_support import (
    Pipeline,
    direct_ids,
    engine_ids,
    prompt_record,
    reference_requests,
    row_requests,
)
from tests.engine.test_vllm_server import vllm_version
from tests.integration.worker_support import (
    count_generations,
    dead_letters,
    generations,
    publish_prompts,
)
from tests.running import WorkerThread, wait_until

pytestmark = pytest.mark.engine


def _engine(row: dict) -> str | None:
    return row.get("engine")  # a Parquet column once GenerationRecord v2 carries it


def test_greedy_rows_are_the_engines_ids_and_transformers_greedy(
        vllm_server: VllmServer, kafka_config: KafkaConfig, greedy_reference: Reference, tmp_path: Path,
        record_property: Callable[[str, object], None]) -> None:
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(SAMPLE_PROMPTS.read_text().splitlines()[:24]) + "\n")
    pipeline = Pipeline(kafka_config, (vllm_server.url,), tmp_path / "dataset")
    worker = pipeline.start()
    summary = run_producer(ProducerConfig(
        kafka=kafka_config, inputs=(str(inputs),), partitions=3, prompts=PromptSettings(
            tokenizer=str(TOKENIZER_DIR), samples=1,
            sampling=SamplingDefaults(max_new_tokens=20, temperature=0.0, top_p=1.0, top_k=-1))))
    # Rows of the demo file override some params (temperature, max_new_tokens): each row is
    # checked against the params it was sent with, which the row itself records.
    outcome = pipeline.finish(worker, summary.published)
    assert summary.published > 0 and not outcome.dead
    rows = outcome.rows
    assert len(rows) == summary.published and len({r["id"] for r in rows}) == len(rows)
    outputs = outcome.outputs()
    direct = {r["id"]: engine_ids(vllm_server.url, r["input_ids"][:r["prompt_len"]],
                                  json.loads(r["sampling_params"]), r["id"]) for r in rows}
    assert outputs == direct, "a row differs from the engine's own token_ids for the same request"
    greedy = row_requests(rows)
    expected = greedy_reference(greedy)
    equal = sum(outputs[rid] == ids for rid, ids in expected.items())
    record_property("greedy_rows_compared", len(expected))
    record_property("greedy_rows_equal", equal)
    print(f"\ngreedy equality: {equal}/{len(expected)} greedy rows equal transformers' greedy generate")
    assert len(expected) >= 5 and equal == len(expected)
    for row in rows:
        assert row["engine_version"] == vllm_version() and row["endpoint"] == vllm_server.url
        assert row["model_path"].endswith(Path(vllm_server.model_dir).name)
        assert _engine(row) in (None, "vllm")
        if row["finish_reason"] == "length":
            assert row["completion_tokens"] == json.loads(row["sampling_params"])["max_new_tokens"]
        else:
            assert row["input_ids"][-1] == int(row["matched_stop"])


def test_stop_ids_length_n_samples_and_context_overflow(
        vllm_server: VllmServer, kafka_config: KafkaConfig, greedy_reference: Reference,
        tmp_path: Path) -> None:
    base = [prompt_record(i, [1, 10 + i, 20, 30 + i, 2, 1, 40 + i], max_new_tokens=16) for i in range(6)]
    free = {p["prompt_id"]: direct_ids(vllm_server.url, p) for p in base}
    stopped = []
    for i, p in enumerate(base[:3]):
        ids = free[p["prompt_id"]]
        stopped.append(prompt_record(100 + i, p["input_ids"], max_new_tokens=16, stop_token_ids=(ids[3],)))
    sampled = [prompt_record(200 + i, p["input_ids"], max_new_tokens=12, temperature=0.9, samples=3)
               for i, p in enumerate(base[:2])]
    too_long = prompt_record(300, [7] * (MAX_MODEL_LEN + 52), max_new_tokens=4)
    pipeline = Pipeline(kafka_config, (vllm_server.url,), tmp_path / "dataset", samples_mode="n")
    outcome = pipeline.run([*base, *stopped, *sampled, too_long], rows=6 + 3 + 6)
    by_prompt: dict[str, list[dict]] = {}
    for row in outcome.rows:
        by_prompt.setdefault(row["prompt_id"], []).append(row)
    outputs = outcome.outputs()
    for p in base:  # no stop id given: max_new_tokens gives `length` (a random model never says eos)
        (row,) = by_prompt[p["prompt_id"]]
        assert (row["finish_reason"], row["completion_tokens"]) == ("length", 16)
        assert outputs[row["id"]] == free[p["prompt_id"]]
    expected = greedy_reference(reference_requests(stopped))
    for p in stopped:
        (row,) = by_prompt[p["prompt_id"]]
        stop = p["sampling_params"]["stop_token_ids"][0]
        assert row["finish_reason"] == "stop" and int(row["matched_stop"]) == stop
        assert outputs[row["id"]][-1] == stop and outputs[row["id"]] == expected[row["id"]]
    for p in sampled:  # n=3 in one request: three rows, indexes 0..2, each a valid sample
        rows = by_prompt[p["prompt_id"]]
        assert sorted(r["sample_index"] for r in rows) == [0, 1, 2]
        assert all(0 < r["completion_tokens"] <= 12 and max(outputs[r["id"]]) < 4096 for r in rows)
    assert too_long["prompt_id"] not in by_prompt
    (dead,) = outcome.dead
    assert dead["error_kind"] == "context_exceeded"  # vLLM's /v1/models max_model_len: never sent
    assert f"exceeds the context length of {vllm_server.url} ({MAX_MODEL_LEN} tokens)" in dead["message"]
    assert len(outcome.rows) == 15


def test_killed_server_restarted_ends_with_every_prompt_once(
        vllm_factory: Callable[..., VllmServer], kafka_config: KafkaConfig, greedy_reference: Reference,
        tmp_path: Path) -> None:
    server = vllm_factory()
    prompts = [prompt_record(i, [1, 50 + i, 60, 70 + i % 7, 2, 1], max_new_tokens=32) for i in range(60)]
    worker = WorkerThread(WorkerConfig(kafka=kafka_config, sglang_urls=(server.url,), concurrency=4,
                                       retry_backoff=0.2, retry_backoff_max=2.0, probe_interval=0.5))
    publish_prompts(kafka_config, prompts, partitions=3)
    wait_until(lambda: count_generations(kafka_config) >= 5, timeout=120, what="the first generations")
    server.kill()  # like a crash, mid-run
    time.sleep(3)
    # Back on the same port without the token route: the worker retries, probes it back in, and
    # falls back to /v1/completions with token ids.
    server.start(flags=())
    wait_until(lambda: count_generations(kafka_config) >= 60, timeout=300, what="every prompt generated")
    time.sleep(2)  # a duplicate would land now
    worker.stop.set()
    worker.join(120)
    # The worker's output topic, where a retry that published twice would show (the sink's own
    # exactly-once is tests/integration/test_sink_exactly_once.py).
    records = [value for _, value in generations(kafka_config)]
    ids = [r["prompt_id"] for r in records]
    assert not dead_letters(kafka_config) and set(ids) == {p["prompt_id"] for p in prompts}
    assert len(ids) == 60, Counter(ids).most_common(3)
    expected = greedy_reference(reference_requests(prompts))
    assert {r["id"]: r["output_ids"] for r in records} == expected


def test_mixed_pool_spreads_load_and_stamps_each_engine(
        vllm_server: VllmServer, standin_factory: Callable[..., str], kafka_config: KafkaConfig,
        tmp_path: Path) -> None:
    standin = standin_factory("--latency-model", "none")
    prompts = [prompt_record(i, [1, 80 + i, 90, 2, 1], max_new_tokens=12, temperature=0.7) for i in range(40)]
    pipeline = Pipeline(kafka_config, (vllm_server.url, standin), tmp_path / "dataset", concurrency=8)
    outcome = pipeline.run(prompts, rows=40)
    assert not outcome.dead and len(outcome.rows) == 40
    per_endpoint = Counter(r["endpoint"] for r in outcome.rows)
    assert set(per_endpoint) == {vllm_server.url, standin} and min(per_endpoint.values()) >= 5, per_endpoint
    for row in outcome.rows:
        on_vllm = row["endpoint"] == vllm_server.url
        assert row["engine_version"] == (vllm_version() if on_vllm else "0.0.0-eaglefeed-standin")
        assert _engine(row) in (None, "vllm" if on_vllm else "sglang")
