"""``eaglefeed generate``: prompts topic → SGLang ``/generate`` → generations topic.

One asyncio loop runs the requests; every KafkaConsumer call goes through one dedicated
thread (the consumer is not thread-safe). A prompt's input offset is finished only when all
of its GenerationRecords (or its dead letter) are acknowledged by the broker, and only the
contiguous finished prefix of each partition is committed (see ``consumers.offsets``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry

from consumers.inference import Generation, InferenceClient, ServerInfo
from consumers.offsets import OffsetTracker
from eaglefeed.config import WorkerConfig
from eaglefeed.deadletter import dead_letter
from eaglefeed.errors import InferenceError, SchemaError
from eaglefeed.kafka import make_consumer, make_producer
from eaglefeed.lifecycle import StopSignal
from eaglefeed.metrics import WorkerMetrics, serve_metrics
from schemas import GENERATION, PROMPT

log = logging.getLogger(__name__)


def run_worker(cfg: WorkerConfig, *, stop: StopSignal | None = None,
               registry: CollectorRegistry | None = None) -> int:
    """Run a generate worker until stopped (or idle for ``cfg.exit_when_idle`` seconds).

    Returns:
        the number of prompt records finished.
    """
    registry = registry or CollectorRegistry()
    metrics = WorkerMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    return asyncio.run(_Worker(cfg, stop or StopSignal(), metrics).run())


class _Worker:
    def __init__(self, cfg: WorkerConfig, stop: StopSignal, metrics: WorkerMetrics) -> None:
        self.cfg = cfg
        self.stop = stop
        self.metrics = metrics
        self.tracker = OffsetTracker()
        self.tasks: set[asyncio.Task[None]] = set()
        self.finished = 0

    async def run(self) -> int:
        cfg = self.cfg
        self.loop = asyncio.get_running_loop()
        self.kafka_thread = ThreadPoolExecutor(1, thread_name_prefix="kafka-consumer")
        consumer = await self._kafka(make_consumer, cfg.kafka, cfg.group_id,
                                     max_poll_records=min(cfg.concurrency, 500))
        self.consumer: KafkaConsumer = consumer
        self.producer: KafkaProducer = make_producer(cfg.kafka)
        await self._kafka(consumer.subscribe, [cfg.kafka.prompts_topic],
                          listener=_Rebalance(self.tracker, consumer))
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
        limits = httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency)
        async with httpx.AsyncClient(timeout=cfg.request_timeout, limits=limits, headers=headers) as http:
            self.client = InferenceClient(client=http, urls=cfg.sglang_urls, max_attempts=cfg.max_attempts)
            try:
                await self._loop()
            finally:
                await self._shutdown()
        return self.finished

    async def _loop(self) -> None:
        cfg = self.cfg
        last_commit = last_activity = time.monotonic()
        paused = False
        while not self.stop.is_set():
            room = cfg.concurrency - len(self.tasks)
            if room <= 0 and not paused:
                await self._kafka(self.consumer.pause, *self.tracker.assigned())
                paused = True
            elif room > 0 and paused:
                await self._kafka(self.consumer.resume, *self.consumer.paused())
                paused = False
            batch = await self._kafka(self.consumer.poll, timeout_ms=100, max_records=max(room, 1))
            for tp, records in batch.items():
                for rec in records:
                    epoch = self.tracker.start(tp, rec.offset)
                    if epoch is not None:
                        self._spawn(self._process(tp, rec, epoch))
            now = time.monotonic()
            if batch or self.tasks:
                last_activity = now
            if now - last_commit >= cfg.commit_interval:
                await self._commit()
                last_commit = now
            if cfg.exit_when_idle is not None and now - last_activity >= cfg.exit_when_idle:
                log.info("idle for %.0fs: exiting", cfg.exit_when_idle)
                break

    async def _process(self, tp: Any, rec: Any, epoch: int) -> None:
        try:
            prompt = PROMPT.decode(rec.value)
        except SchemaError as exc:
            await self._dead_letter(tp, rec, epoch, "undecodable_prompt", str(exc), attempts=0)
            return
        self.metrics.in_flight.inc()
        try:
            results = await asyncio.gather(*(self._sample(prompt, i) for i in range(prompt["num_samples"])))
        except InferenceError as exc:
            self.metrics.requests.labels(exc.kind).inc()
            await self._dead_letter(tp, rec, epoch, exc.kind, str(exc), attempts=self.cfg.max_attempts,
                                    record_id=prompt["prompt_id"])
            return
        finally:
            self.metrics.in_flight.dec()
        futures = []
        for index, (gen, info, _attempts) in enumerate(results):
            record = generation_record(prompt, index, gen, info, self.cfg.worker_id)
            futures.append(self._send(self.cfg.kafka.generations_topic, record["id"].encode(),
                                      GENERATION.encode(record)))
        await asyncio.gather(*futures)
        self.metrics.records_published.inc(len(futures))
        self.tracker.finish(tp, rec.offset, epoch)
        self.finished += 1

    async def _sample(self, prompt: dict[str, Any], index: int) -> tuple[Generation, ServerInfo, int]:
        params = request_params(prompt, index)
        started = time.perf_counter()
        gen, info, attempts = await self.client.generate(
            prompt["input_ids"], params, rid_prefix=f"{prompt['prompt_id']}-{index}",
            on_retry=lambda kind: self.metrics.retries.labels(kind).inc())
        self.metrics.requests.labels("ok").inc()
        self.metrics.request_seconds.observe(time.perf_counter() - started)
        self.metrics.generated_tokens.inc(len(gen.output_ids))
        return gen, info, attempts

    async def _dead_letter(self, tp: Any, rec: Any, epoch: int, kind: str, message: str, *, attempts: int,
                           record_id: str | None = None) -> None:
        log.warning("dead letter (%s) for %s@%d: %s", kind, tp, rec.offset, message)
        value = dead_letter(stage="generate", kind=kind, message=message, topic=rec.topic,
                            partition=rec.partition, offset=rec.offset, key=rec.key,
                            value=rec.value, record_id=record_id, attempts=attempts)
        await self._send(self.cfg.kafka.dead_letter_topic, rec.key, value)
        self.metrics.dead_letters.labels(kind).inc()
        self.tracker.finish(tp, rec.offset, epoch)
        self.finished += 1

    async def _send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Publish and wait for the broker's acknowledgement, re-sending on failure."""
        while True:
            done: asyncio.Future[None] = self.loop.create_future()
            fut = self.producer.send(topic, key=key, value=value)
            fut.add_callback(lambda _m, d=done: self.loop.call_soon_threadsafe(_resolve, d, None))
            fut.add_errback(lambda e, d=done: self.loop.call_soon_threadsafe(_resolve, d, e))
            error = await _wait(done)
            if error is None:
                return
            log.warning("publish to %s failed (%r); retrying", topic, error)
            await asyncio.sleep(1.0)

    async def _commit(self) -> None:
        offsets = self.tracker.committable()
        if not offsets:
            return
        commit = {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}
        try:
            await self._kafka(self.consumer.commit, commit)
        except Exception as exc:  # noqa: BLE001 - a failed commit is retried on the next tick
            log.warning("offset commit failed (%r); will retry", exc)
            return
        self.tracker.mark_committed(offsets)

    async def _shutdown(self) -> None:
        if self.tasks:
            log.info("draining %d in-flight prompts", len(self.tasks))
            await asyncio.gather(*self.tasks, return_exceptions=True)
        await self._commit()
        await self._kafka(self.consumer.close)
        self.producer.close()
        self.kafka_thread.shutdown()

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("prompt task failed", exc_info=task.exception())
            self.stop.set()

    async def _kafka(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.loop.run_in_executor(self.kafka_thread, lambda: fn(*args, **kwargs))


class _Rebalance(AsyncConsumerRebalanceListener):
    """Commit the finished watermark of revoked partitions; start fresh epochs on assignment."""

    def __init__(self, tracker: OffsetTracker, consumer: KafkaConsumer) -> None:
        self.tracker = tracker
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        offsets = self.tracker.revoke(list(revoked))
        if offsets:
            await self.consumer.commit_async({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.tracker.assign(list(assigned))


def request_params(prompt: dict[str, Any], index: int) -> dict[str, Any]:
    """The explicit SGLang sampling params for sample ``index`` of ``prompt``."""
    sp = prompt["sampling_params"]
    params = {
        "max_new_tokens": sp["max_new_tokens"], "temperature": sp["temperature"],
        "top_p": sp["top_p"], "top_k": sp["top_k"], "min_p": sp["min_p"],
        "sampling_seed": sp["seed"] + index,
        # text-only settings: keep special tokens and stops visible in `text` for debugging
        "skip_special_tokens": False, "no_stop_trim": True,
    }
    if sp["stop_token_ids"]:
        params["stop_token_ids"] = list(sp["stop_token_ids"])
    return params


def generation_record(prompt: dict[str, Any], index: int, gen: Generation, info: ServerInfo,
                      worker_id: str) -> dict[str, Any]:
    """Build the GenerationRecord of sample ``index``: exactly the ids sent and received."""
    matched = gen.matched_stop
    return {
        "id": f"{prompt['prompt_id']}:{index}",
        "prompt_id": prompt["prompt_id"],
        "sample_index": index,
        "prompt_ids": prompt["input_ids"],
        "output_ids": gen.output_ids,
        "finish_reason": gen.finish_reason,
        "matched_stop": matched if isinstance(matched, (int, str)) else None,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.completion_tokens,
        "cached_tokens": gen.cached_tokens,
        "latency_seconds": gen.latency_seconds,
        "endpoint": gen.endpoint,
        "model_path": info.model_path,
        "engine_version": info.engine_version,
        "worker_id": worker_id,
        "source": prompt["source"],
        "source_row": prompt["source_row"],
        "turn_index": prompt["turn_index"],
        "sampling_params": json.dumps(request_params(prompt, index), sort_keys=True),
        "chat_template_kwargs": prompt["chat_template_kwargs"],
        "tokenizer_id": prompt["tokenizer_id"],
        "tokenizer_hash": prompt["tokenizer_hash"],
        "chat_template_hash": prompt["chat_template_hash"],
        "prompt_created_at": prompt["created_at"],
        "created_at": int(time.time() * 1000),
    }


def _resolve(done: asyncio.Future[None], error: Exception | None) -> None:
    if not done.done():
        done.set_result(error)  # type: ignore[arg-type]


async def _wait(done: asyncio.Future[Any]) -> Any:
    return await done
