"""``eaglefeed generate``: prompts topic → SGLang ``/generate`` → generations topic.

One asyncio loop runs the requests; every KafkaConsumer call goes through one dedicated
thread (the consumer is not thread-safe). Up to ``2 × concurrency`` sample requests are
dispatched (the extra half waits at the request slots, so a slot that frees is refilled at
once); past that every partition is paused until the window drains. A prompt's input offset
is finished only when all of its GenerationRecords (or dead letters) are durable
(``consumers.worker.publish``), and only the contiguous finished prefix of each partition is
committed (``consumers.worker.offsets``).

Partitions move between members with the cooperative-sticky assignor, so a rebalance only
touches the partitions that move: their finished watermark is committed, their in-flight
requests are cancelled, and nothing they finish later is committed here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from kafka import KafkaConsumer
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import KafkaError, RebalanceInProgressError
from prometheus_client import CollectorRegistry

from consumers.worker.http import make_http_client
from consumers.worker.inference import InferenceClient
from consumers.worker.offsets import OffsetTracker
from consumers.worker.publish import AckedPublisher, Done, Message, TransactionalPublisher
from consumers.worker.rebalance import Rebalance
from consumers.worker.records import generation_record, invalid_reason, requests_for
from consumers.worker.servers import Server, ServerPool
from consumers.worker.vocab import VocabSizes
from eaglefeed.config import WorkerConfig
from eaglefeed.deadletter import dead_letter
from eaglefeed.errors import EaglefeedError, FatalInferenceError, InferenceError, SchemaError
from eaglefeed.kafka import make_consumer, make_producer, subscribe, wait_for_topics
from eaglefeed.lag import LagReporter
from eaglefeed.lifecycle import StopSignal
from eaglefeed.metrics import LagMetrics, WorkerMetrics, serve_metrics
from schemas import GENERATION, PROMPT

log = logging.getLogger(__name__)
POLL_MS = 100


class WorkerError(EaglefeedError):
    """The worker stopped because of a failure it cannot work around."""


def run_worker(cfg: WorkerConfig, *, stop: StopSignal | None = None,
               registry: CollectorRegistry | None = None) -> int:
    """Run a generate worker until stopped (or idle for ``cfg.exit_when_idle`` seconds).

    Returns:
        the number of prompt records finished.
    """
    registry = registry or CollectorRegistry()
    metrics = WorkerMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    lag = None
    if cfg.metrics_port is not None:  # consumer lag of the generate group, for the dashboard
        lag = LagReporter(kafka=cfg.kafka, stage="generate", group=cfg.group_id,
                          topic=cfg.kafka.prompts_topic, metrics=LagMetrics.create(registry)).start()
    try:
        return asyncio.run(_Worker(cfg, stop or StopSignal(), metrics).run())
    finally:
        if lag is not None:
            lag.stop()


class _Worker:
    def __init__(self, cfg: WorkerConfig, stop: StopSignal, metrics: WorkerMetrics) -> None:
        self.cfg = cfg
        self.stop = stop
        self.metrics = metrics
        self.tracker = OffsetTracker()
        self.vocab = VocabSizes(fixed=cfg.vocab_size, from_tokenizer=cfg.check_vocab)
        self.tasks: dict[asyncio.Task[None], tuple[Any, int]] = {}  # task → (partition, window weight)
        self.window = 2 * cfg.concurrency
        self.used = 0
        self.finished = 0
        self.failure: BaseException | None = None

    async def run(self) -> int:
        cfg = self.cfg
        self.loop = asyncio.get_running_loop()
        self.kafka_thread = ThreadPoolExecutor(1, thread_name_prefix="kafka-consumer")
        if not await self._kafka(wait_for_topics, cfg.kafka, [cfg.kafka.prompts_topic], stop=self.stop):
            return 0  # stopped before the producer created the topic
        session = {"session_timeout_ms": int(cfg.session_timeout * 1000)} if cfg.session_timeout else {}
        self.consumer: KafkaConsumer = await self._kafka(
            make_consumer, cfg.kafka, cfg.group_id, max_poll_records=min(self.window, 500),
            partition_assignment_strategy=(CooperativeStickyAssignor,), **session)
        if cfg.exactly_once:
            producer = make_producer(cfg.kafka, transactional_id=f"{cfg.group_id}-{cfg.worker_id}")
            self.publisher: Any = TransactionalPublisher(
                producer=producer, tracker=self.tracker,
                group_metadata=lambda: self._kafka(self.consumer.group_metadata),
                on_transaction=lambda outcome: self.metrics.transactions.labels(outcome).inc())
        else:
            self.publisher = AckedPublisher(producer=make_producer(cfg.kafka), tracker=self.tracker,
                                            commit=lambda offsets: self._kafka(self.consumer.commit, offsets))
        await self.publisher.start()
        listener = Rebalance(tracker=self.tracker, consumer=self.consumer,
                             commit_on_revoke=not cfg.exactly_once,
                             cancel=lambda tps: self.loop.call_soon_threadsafe(self._cancel, tps))
        await self._kafka(subscribe, self.consumer, [cfg.kafka.prompts_topic], listener=listener)
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
        timeout = httpx.Timeout(cfg.request_timeout, connect=min(10.0, cfg.request_timeout))
        # + connections for info reads and health probes
        http = make_http_client(connections=cfg.concurrency + 8, timeout=timeout, headers=headers)
        async with http:
            pool = ServerPool(client=http, urls=cfg.sglang_urls, eject_after=cfg.eject_after,
                              probe_interval=cfg.probe_interval, on_change=self._server_changed)
            for server in pool.servers:
                self._server_changed(server)
            self.client = InferenceClient(
                pool=pool, concurrency=cfg.concurrency, max_attempts=cfg.max_attempts,
                backoff=cfg.retry_backoff, backoff_max=cfg.retry_backoff_max, on_request=self._request_done)
            try:
                await self._loop()
            except Exception as exc:
                self.failure = exc
            finally:
                await self._shutdown()
                await pool.close()
        if self.failure is not None:
            raise WorkerError(f"generate worker failed: {self.failure!r}") from self.failure
        return self.finished

    async def _loop(self) -> None:
        """Poll → dispatch → commit, until stopped or idle.

        Once stopped, keep polling (everything paused) and committing while the in-flight work
        drains, so the member still takes part in rebalances; return when drained or out of time.
        """
        cfg = self.cfg
        last_commit = last_activity = time.monotonic()
        changes = self.tracker.changes
        drain_until: float | None = None
        while True:
            if self.stop.is_set():
                if drain_until is None:
                    drain_until = time.monotonic() + cfg.drain_seconds
                    log.info("stopping: draining %d in-flight prompts (up to %.0fs)", len(self.tasks),
                             cfg.drain_seconds)
                if not self.tasks or time.monotonic() >= drain_until:
                    return
            room = self.window - self.used if drain_until is None else 0
            batch = await self._kafka(self._poll, room)
            for tp, records in batch.items():
                for rec in records:
                    if drain_until is not None:
                        break  # not started, so never committed: the next owner reads it again
                    epoch = self.tracker.start(tp, rec.offset)
                    if epoch is not None:
                        self._dispatch(rec, Done(tp, rec.offset, epoch))
            now = time.monotonic()
            if batch or self.tasks or changes != self.tracker.changes:
                last_activity, changes = now, self.tracker.changes
            if now - last_commit >= cfg.commit_interval:
                await self._commit()
                last_commit = now
                self.metrics.in_flight_requests.set(self.client.slots.held)
                self.metrics.commit_lag.set(self.tracker.lag())
            if cfg.exit_when_idle is not None and now - last_activity >= cfg.exit_when_idle:
                log.info("idle for %.0fs: exiting", cfg.exit_when_idle)
                break

    def _poll(self, room: int) -> dict[Any, list[Any]]:
        """On the Kafka thread: pause or resume by the window, poll, load new partitions' commits."""
        consumer = self.consumer
        if room <= 0:
            consumer.pause(*consumer.assignment())
        elif consumer.paused():
            consumer.resume(*consumer.paused())
        try:
            batch = consumer.poll(timeout_ms=POLL_MS, max_records=max(1, min(room, 500)))
        except KafkaError as exc:  # kafka-python lets connection errors of a group rejoin escape poll()
            if not exc.retriable:
                raise
            log.warning("poll failed (%r); polling again while the client reconnects", exc)
            time.sleep(POLL_MS / 1000)
            batch = {}
        for tp in self.tracker.needs_committed():
            try:
                committed = consumer.committed(tp, metadata=True)
            except KafkaError as exc:
                log.warning("cannot read the committed offset of %s (%r): nothing to skip", tp, exc)
                committed = None
            self.tracker.load_committed(tp, committed.offset if committed else None,
                                        committed.metadata if committed else None)
        return batch

    def _dispatch(self, rec: Any, done: Done) -> None:
        try:
            prompt: dict[str, Any] | None = PROMPT.decode(rec.value)
            problem = invalid_reason(prompt)  # type: ignore[arg-type]
            kind = "invalid_prompt"
        except SchemaError as exc:
            prompt, problem, kind = None, str(exc), "undecodable_prompt"
        weight = prompt["num_samples"] if prompt is not None and problem is None else 1
        if problem is not None:
            coro = self._finish(rec, done, [self._dead_letter(rec, kind, problem, 0, None)])
        else:
            coro = self._process(rec, done, prompt)  # type: ignore[arg-type]
        task = self.loop.create_task(coro)
        self.tasks[task] = (done.tp, weight)
        self.used += weight
        self.metrics.in_flight.inc()
        task.add_done_callback(self._task_done)

    async def _process(self, rec: Any, done: Done, prompt: dict[str, Any]) -> None:
        try:
            vocab = await self.vocab.size_for(prompt["tokenizer_id"])
        except FatalInferenceError as exc:
            dead = self._dead_letter(rec, exc.kind, str(exc), 0, prompt["prompt_id"])
            await self._finish(rec, done, [dead])
            return
        parts = await asyncio.gather(*(self._request(rec, prompt, indexes, params, vocab)
                                       for indexes, params in requests_for(prompt, self.cfg.samples_mode)))
        await self._finish(rec, done, [msg for part in parts for msg in part])

    async def _request(self, rec: Any, prompt: dict[str, Any], indexes: list[int], params: dict[str, Any],
                       vocab: int | None) -> list[Message]:
        pid = prompt["prompt_id"]
        try:
            samples = await self.client.generate(prompt["input_ids"], params, rid=f"{pid}-{indexes[0]}",
                                                 vocab_size=vocab, on_retry=self._retried)
        except InferenceError as exc:
            attempts = getattr(exc, "attempts", 0)
            return [self._dead_letter(rec, exc.kind, str(exc), attempts, f"{pid}:{i}") for i in indexes]
        messages: list[Message] = []
        topic = self.cfg.kafka.generations_topic
        try:
            for index, gen in zip(indexes, samples.generations, strict=True):
                record = generation_record(prompt, index, gen, samples.info, params, self.cfg.worker_id)
                messages.append((topic, record["id"].encode(), GENERATION.encode(record)))
        except (SchemaError, ValueError, TypeError) as exc:
            # A response field our contract cannot hold (a huge matched_stop, bad text): never
            # stop the worker on it, or every restart would stall on the same prompt.
            return [self._dead_letter(rec, "invalid_response", f"response does not fit the record: {exc}",
                                      1, f"{pid}:{i}") for i in indexes]
        for gen in samples.generations:
            self.metrics.generated_tokens.inc(len(gen.output_ids))
            self.metrics.output_tokens.observe(len(gen.output_ids))
        return messages

    async def _finish(self, rec: Any, done: Done, messages: list[Message]) -> None:
        await self.publisher.publish(messages, done)
        published = sum(1 for m in messages if m[0] == self.cfg.kafka.generations_topic)
        self.metrics.records_published.inc(published)
        self.finished += 1

    def _dead_letter(self, rec: Any, kind: str, message: str, attempts: int,
                     record_id: str | None) -> Message:
        log.warning("dead letter (%s) for %s-%d@%d: %s", kind, rec.topic, rec.partition, rec.offset, message)
        self.metrics.dead_letters.labels(kind).inc()
        value = dead_letter(stage="generate", kind=kind, message=message, topic=rec.topic,
                            partition=rec.partition, offset=rec.offset, key=rec.key, value=rec.value,
                            record_id=record_id, attempts=attempts)
        return (self.cfg.kafka.dead_letter_topic, rec.key, value)

    async def _commit(self) -> None:
        try:
            await self.publisher.commit()
        except RebalanceInProgressError:
            log.debug("commit deferred: the group is rebalancing")
        except KafkaError as exc:  # a failed commit is retried on the next tick
            log.warning("offset commit failed (%r); will retry", exc)

    async def _shutdown(self) -> None:
        """Cancel what did not drain in time, commit what finished, close (in that order)."""
        late = list(self.tasks)
        if late:
            log.info("cancelling %d prompts still in flight", len(late))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        try:  # what finished is safe to commit, even when the worker is stopping on a failure
            await self._commit()
        except Exception as exc:
            log.error("final commit failed (%r)", exc)
            self.failure = self.failure or exc
        await self._kafka(self.consumer.close)
        await self.publisher.close()
        self.kafka_thread.shutdown()

    def _cancel(self, partitions: Any) -> None:
        """Cancel the in-flight work of partitions this member no longer owns."""
        doomed = [task for task, (tp, _w) in self.tasks.items() if tp in partitions]
        if doomed:
            log.info("cancelling %d in-flight prompts of revoked partitions", len(doomed))
        for task in doomed:
            task.cancel()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        _tp, weight = self.tasks.pop(task)
        self.used -= weight
        self.metrics.in_flight.dec()
        if not task.cancelled() and task.exception() is not None:
            log.error("prompt task failed; stopping", exc_info=task.exception())
            self.failure = self.failure or task.exception()
            self.stop.set()

    def _retried(self, kind: str) -> None:
        self.metrics.retries.labels(kind).inc()

    def _request_done(self, outcome: str, seconds: float) -> None:
        self.metrics.requests.labels(outcome).inc()
        if outcome == "ok":
            self.metrics.request_seconds.observe(seconds)

    def _server_changed(self, server: Server) -> None:
        self.metrics.server_outstanding.labels(server.url).set(server.outstanding)
        self.metrics.server_healthy.labels(server.url).set(1 if server.healthy else 0)

    async def _kafka(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.loop.run_in_executor(self.kafka_thread, lambda: fn(*args, **kwargs))
