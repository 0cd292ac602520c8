"""Run the generate worker on the fake Kafka and a scripted SGLang ``/generate`` (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from eaglefeed.core.config import KafkaConfig, WorkerConfig
from eaglefeed.schemas import GENERATION
from tests.factories import prompt
from tests.fakes.kafka import FakeKafka
from tests.running import WorkerThread

KAFKA = KafkaConfig(topic_prefix="t")
PROMPTS, GENERATIONS, DEAD_LETTERS = KAFKA.prompts_topic, KAFKA.generations_topic, KAFKA.dead_letter_topic


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


class WorkerRun(WorkerThread):
    """``run_worker`` on a thread, on ``fake`` and ``server``; settings override the test defaults."""

    def __init__(self, fake: FakeKafka, server: Server, **settings: Any) -> None:
        defaults: dict[str, Any] = {"worker_id": "w", "check_vocab": False, "commit_interval": 0.02,
                                    "concurrency": 8, "retry_backoff": 0.001,
                                    "settle_seconds": 0.0}
        self.fake = fake
        cfg = WorkerConfig(**{"kafka": KAFKA, "sglang_urls": ("http://sglang",), **defaults, **settings})
        super().__init__(cfg, clients=fake, transport=server.transport, registry=CollectorRegistry())
