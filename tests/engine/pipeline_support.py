"""Run the real pipeline (Kafka broker, generate worker, sink) against real engine servers."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from eaglefeed.consumers.generate.inference import vllm_sampling_params
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig, WorkerConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset.manifest import live_segments, read_manifest
from tests.engine.conftest import TOKENIZER_DIR
from tests.integration.worker_support import dead_letters, publish_prompts
from tests.running import WorkerThread

NATIVE = "/inference/v1/generate"


def prompt_record(i: int, input_ids: list[int], *, max_new_tokens: int = 24, temperature: float = 0.0,
                  samples: int = 1, stop_token_ids: tuple[int, ...] = (), seed: int = 0) -> dict[str, Any]:
    """A PromptRecord as the producer writes it, for the demo tokenizer."""
    return {
        "prompt_id": hashlib.sha256(f"engine-{i}".encode()).hexdigest()[:24], "source": "engine-test",
        "source_row": str(i), "turn_index": 0, "input_ids": list(input_ids), "num_samples": samples,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": 1.0,
                            "top_k": -1, "min_p": 0.0, "stop_token_ids": list(stop_token_ids),
                            "seed": seed + i},
        "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": "t",
        "chat_template_hash": "c", "created_at": int(time.time() * 1000),
    }


@dataclass
class Outcome:
    """What a pipeline run left: the Parquet rows and the dead letters."""

    rows: list[dict[str, Any]]
    dead: list[dict[str, Any]]

    def outputs(self) -> dict[str, list[int]]:
        """Generated ids by row id (the ids after the prompt)."""
        return {r["id"]: r["input_ids"][r["prompt_len"]:] for r in self.rows}


class Pipeline:
    """A sink thread and a worker thread on ``kafka``; ``run`` publishes prompts and waits for rows."""

    def __init__(self, kafka: KafkaConfig, urls: tuple[str, ...], out: Path, **worker: Any) -> None:
        self.kafka, self.out = kafka, out
        settings = {"concurrency": 16, "exit_when_idle": 6.0, "retry_backoff": 0.2,
                    "retry_backoff_max": 2.0, "probe_interval": 0.5, **worker}
        self.worker_cfg = WorkerConfig(kafka=kafka, sglang_urls=urls, **settings)
        self.stop = StopSignal()
        self.sink_result: dict[str, Any] = {}

    def publish(self, prompts: list[dict[str, Any]]) -> None:
        publish_prompts(self.kafka, prompts, partitions=3)

    def start(self) -> WorkerThread:
        cfg = SinkConfig(kafka=self.kafka, output=self.out, flush_seconds=0.5)
        self.sink = threading.Thread(target=lambda: self.sink_result.update(s=run_sink(cfg, stop=self.stop)),
                                     daemon=True)
        self.sink.start()
        return WorkerThread(self.worker_cfg)

    def finish(self, worker: WorkerThread, rows: int, dead: int = 0, timeout: float = 300) -> Outcome:
        worker.join(timeout)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._rows() < rows:
            time.sleep(0.2)
        self.stop.set()
        self.sink.join(timeout=60)
        table = pq.read_table(self.out / "segments") if (self.out / "segments").exists() else None
        return Outcome(rows=table.to_pylist() if table is not None else [], dead=dead_letters(self.kafka))

    def run(self, prompts: list[dict[str, Any]], rows: int, dead: int = 0) -> Outcome:
        self.publish(prompts)
        return self.finish(self.start(), rows, dead)

    def _rows(self) -> int:
        try:
            return sum(s["rows"] for s in live_segments(read_manifest(self.out)).values())
        except FileNotFoundError:
            return 0


def engine_ids(url: str, input_ids: list[int], params: dict[str, Any], rid: str) -> list[int]:
    """The ids vLLM's native route returns for these ids and (our, SGLang-named) params, asked directly."""
    body = {"request_id": f"direct-{rid}", "token_ids": input_ids,
            "sampling_params": vllm_sampling_params(params)}
    resp = httpx.post(url + NATIVE, json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["token_ids"])


def direct_ids(url: str, prompt: dict[str, Any]) -> list[int]:
    """``engine_ids`` for a greedy PromptRecord."""
    sp = prompt["sampling_params"]
    return engine_ids(url, prompt["input_ids"], {"max_new_tokens": sp["max_new_tokens"], "temperature": 0,
                                                 "stop_token_ids": sp["stop_token_ids"]}, prompt["prompt_id"])


def reference_requests(prompts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """greedy_reference.py requests for greedy prompts (row id ``prompt_id:0``)."""
    return [{"id": f"{p['prompt_id']}:0", "input_ids": p["input_ids"],
             "max_new_tokens": p["sampling_params"]["max_new_tokens"],
             "stop_token_ids": p["sampling_params"]["stop_token_ids"]} for p in prompts]


def row_requests(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """greedy_reference.py requests for the greedy rows among ``rows`` (by the params they were sent)."""
    requests = []
    for row in rows:
        params = json.loads(row["sampling_params"])
        if params["temperature"] == 0:
            requests.append({"id": row["id"], "input_ids": row["input_ids"][:row["prompt_len"]],
                             "max_new_tokens": params["max_new_tokens"],
                             "stop_token_ids": params.get("stop_token_ids", [])})
    return requests
