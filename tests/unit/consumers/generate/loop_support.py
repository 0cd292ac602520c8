"""Run the generate worker on the fake Kafka and a scripted SGLang ``/generate`` (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.generate.loop import run_worker
from eaglefeed.core.config import KafkaConfig, WorkerConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.schemas import GENERATION, PROMPT
from tests.fakes.kafka import FakeKafka

KAFKA = KafkaConfig(topic_prefix="t")
PROMPTS, GENERATIONS, DEAD_LETTERS = KAFKA.prompts_topic, KAFKA.generations_topic, KAFKA.dead_letter_topic


def prompt(pid: str, *, samples: int = 1) -> bytes:
    """An encoded PromptRecord whose prompt id is ``pid``."""
    return PROMPT.encode({
        "prompt_id": pid, "source": "test", "source_row": pid, "turn_index": 0, "input_ids": [5, 6, 7],
        "num_samples": samples,
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.7, "top_p": 0.95, "top_k": 20,
                            "min_p": 0.0, "stop_token_ids": [], "seed": 1},
        "chat_template_kwargs": "{}", "tokenizer_id": "tok", "tokenizer_hash": "t",
        "chat_template_hash": "c", "created_at": 0,
    })


def kafka_with_prompts(per_partition: int, partitions: int = 2, **kw: Any) -> FakeKafka:
    """A fake broker with the pipeline's topics; prompt ``p{partition}-{offset}`` at each offset."""
    fake = FakeKafka(**kw)
    fake.create_topic(PROMPTS, partitions)
    fake.create_topic(GENERATIONS, partitions)
    fake.create_topic(DEAD_LETTERS, 1)
    for p in range(partitions):
        for o in range(per_partition):
            fake.append(PROMPTS, prompt(f"p{p}-{o}"), key=b"k", partition=p)
    return fake


def generated_ids(fake: FakeKafka, *, committed_only: bool = True) -> list[str]:
    """The record ids on the generations topic."""
    return [GENERATION.decode(r.value)["id"] for r in fake.read(GENERATIONS, committed_only=committed_only)]


class Server:
    """A scripted SGLang server: answers every ``/generate`` with a valid sample; held prompts wait."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[str] = []  # prompt ids, in arrival order
        self.held: set[str] = set()
        self.stalls: dict[str, float] = {}  # prompt id → seconds its release blocks the whole event loop
        self.waiting: set[str] = set()
        self.fail: dict[str, int] = {}  # prompt id → how many of its next requests get a 400
        self.transport = httpx.MockTransport(self._handle)

    def hold(self, *pids: str) -> None:
        self.held.update(pids)

    def release(self, *pids: str) -> None:
        self.held.difference_update(pids or set(self.held))

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return httpx.Response(401, json={"message": "bad key"})
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model"})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.0"})
        body = json.loads(request.content)
        pid = body["rid"].rsplit("-", 3)[0]
        if self.fail.get(pid):
            self.fail[pid] -= 1
            self.requests.append(pid)
            return httpx.Response(400, json={"message": "refused"})
        self.requests.append(pid)
        self.waiting.add(pid)
        try:
            while pid in self.held:
                await asyncio.sleep(0.002)
        finally:
            self.waiting.discard(pid)
        if pid in self.stalls:
            time.sleep(self.stalls.pop(pid))  # the worker's event loop stands still (a paused process)
        ids = body["input_ids"]
        return httpx.Response(200, json={"text": "x", "output_ids": [7, 8, 2], "meta_info": {
            "id": body["rid"], "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": len(ids),
            "completion_tokens": 3, "cached_tokens": 0, "e2e_latency": 0.01}})


class WorkerRun:
    """``run_worker`` on a thread, on ``fake`` and ``server``; settings override the test defaults."""

    def __init__(self, fake: FakeKafka, server: Server, **settings: Any) -> None:
        defaults: dict[str, Any] = {"worker_id": "w", "check_vocab": False, "commit_interval": 0.02,
                                    "concurrency": 8, "retry_backoff": 0.001,
                                    "settle_seconds": 0.0}
        self.cfg = WorkerConfig(**{"kafka": KAFKA, "sglang_urls": ("http://sglang",), **defaults, **settings})
        self.fake = fake
        self.stop = StopSignal()
        self.registry = CollectorRegistry()
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(server,), daemon=True)
        self.thread.start()

    def _run(self, server: Server) -> None:
        try:
            self.result["finished"] = run_worker(self.cfg, stop=self.stop, registry=self.registry,
                                                 clients=self.fake, transport=server.transport)
        except BaseException as exc:  # noqa: BLE001 - surfaced by join()
            self.result["error"] = exc

    def join(self, timeout: float = 10) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        if "error" in self.result:
            raise self.result["error"]
        return int(self.result["finished"])

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def wait_until(predicate: Any, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
