"""``eaglefeed generate``: prompts topic → SGLang ``/generate`` → generations topic.

Up to ``2 × concurrency`` sample requests are dispatched (``auto``: twice the sum of the servers'
limits; the extra half waits at the request slots, so a freed slot is refilled at once); past
that every partition is paused until the window drains, and while the hidden states stored and
not yet consumed by trainers reach ``--hidden-states-budget`` (``backpressure``). A prompt's input
offset is finished only when all of its GenerationRecords (or dead letters) are durable, and only
the contiguous finished prefix of each partition is committed:
``eaglefeed.consumers.generate.checkpoint`` numbers the commit order.

Partitions move between members with the cooperative-sticky assignor, so a rebalance only
touches the partitions that move: their finished watermark is committed, their in-flight
requests are cancelled, and nothing they finish later is committed here. A newly assigned
partition is not fetched until the assignment has stayed unchanged for ``--settle-seconds``
(``eaglefeed.consumers.generate.rebalance``), so members started together cancel nothing.

Which thread runs what:
    the event loop: :meth:`_Worker.run` and ``_loop``, the prompt tasks (``_dispatch`` to
        ``_finish``), the HTTP client and its server pool, ``Publisher.publish``,
        ``GenerateCheckpoint.commit`` and ``GenerateCheckpoint.finished``, ``_cancel`` and ``_task_done``;
    the consumer thread (``kafka-consumer``, one thread: kafka-python's consumer is not
        thread-safe): every consumer call: creating and subscribing it, ``_poll`` (pause/resume,
        poll, ``GenerateCheckpoint.load_committed``), the commits and group metadata that
        ``GenerateCheckpoint.commit`` awaits, ``close``;
    kafka-python's IO thread: the rebalance listener (``Rebalance``, which calls into the
        checkpoint and hands cancellations to the event loop) and the send callbacks of
        ``AckedPublisher`` (which hop to the event loop too);
    the transaction thread (``kafka-txn``, ``--exactly-once`` only, a daemon): every call of the
        transactional producer (``TransactionalPublisher``, ``TransactionalGenerateCheckpoint``);
        a producer whose transaction went past ``--transaction-deadline`` is left behind with its
        thread, and a new pair takes over (``kafka-txn-abandoned`` closes the old producer);
    helper threads: ``asyncio.to_thread`` (closing the acked producer, loading tokenizers in
        ``VocabSizes``), the /metrics server and the lag reporter (``eaglefeed.core.stage``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import KafkaError
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.generate.backpressure import states_budget
from eaglefeed.consumers.generate.checkpoint import GenerateCheckpoint, OnThread
from eaglefeed.consumers.generate.durable import DurableIds, generation_ids, load_durable_ids
from eaglefeed.consumers.generate.inference import (
    InferenceClient,
    Server,
    ServerModels,
    ServerPool,
    reach_servers,
)
from eaglefeed.consumers.generate.offsets import OffsetTracker
from eaglefeed.consumers.generate.one_thread import OneThread
from eaglefeed.consumers.generate.publish import Done, Message, Publisher
from eaglefeed.consumers.generate.rebalance import Rebalance, SettleHold, StallGuard
from eaglefeed.consumers.generate.records import PromptMessages, invalid_reason
from eaglefeed.consumers.generate.status_report import reporting
from eaglefeed.consumers.generate.tokens import VocabSizes
from eaglefeed.consumers.generate.wiring import delivery, http_client, in_flight
from eaglefeed.core.clients import Backlog, Clients, Consumer, KafkaClients, Record
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.errors import (
    ConfigError,
    SchemaError,
    StageStalledError,
    StopRequestedError,
    StoreError,
    UnknownSchemaError,
    WorkerError,
)
from eaglefeed.core.kafka import SESSION_TIMEOUT_MS
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.core.metrics import WorkerMetrics
from eaglefeed.core.progress import ProgressLine
from eaglefeed.core.resume import resume
from eaglefeed.core.stage import IdleClock, consumer_lag, group_lag, stage_metrics
from eaglefeed.core.watchdog import StallWatchdog
from eaglefeed.schemas import PROMPT

log = logging.getLogger(__name__)
POLL_MS = 100


def run_worker(cfg: WorkerConfig, *, stop: StopSignal | None = None,
               registry: CollectorRegistry | None = None, clients: Clients | None = None,
               transport: httpx.AsyncBaseTransport | None = None) -> int:
    """Run a generate worker until stopped (or caught up for ``cfg.exit_when_idle`` seconds).

    Args:
        cfg: the worker's settings.
        stop: set it to drain, commit and return (a fresh one when None).
        registry: where the metrics are registered (a fresh registry when None).
        clients: the Kafka clients (kafka-python on ``cfg.kafka`` when None).
        transport: the HTTP transport to the inference servers (aiohttp's when None; a unit test
            passes an ``httpx.MockTransport``).

    Returns:
        the number of prompt records finished.
    """
    with stage_metrics(WorkerMetrics.create, kafka=cfg.kafka, stage="generate", group=cfg.group_id,
                       topic=cfg.kafka.prompts_topic, port=cfg.metrics_port, registry=registry) as metrics:
        return asyncio.run(_run(cfg, stop=stop or StopSignal(), metrics=metrics, status=clients is None,
                                clients=clients or KafkaClients(kafka=cfg.kafka), transport=transport))


async def _run(cfg: WorkerConfig, *, stop: StopSignal, metrics: WorkerMetrics, clients: Clients,
               transport: httpx.AsyncBaseTransport | None, status: bool = False) -> int:
    """Build the clients (each consumer call on the consumer thread), run the worker and its status report."""
    on_consumer = OneThread("kafka-consumer")
    try:
        topics = [cfg.kafka.prompts_topic]
        if not await on_consumer(clients.wait_for_topics, topics, stop, cfg.exit_when_idle):
            return 0  # stopped before the producer created the topic
        session = {"session_timeout_ms": int(cfg.session_timeout * 1000)} if cfg.session_timeout else {}
        consumer = await on_consumer(clients.consumer, cfg.group_id,
                                     max_poll_records=cfg.max_poll_records,
                                     partition_assignment_strategy=(CooperativeStickyAssignor,), **session)
        tracker = OffsetTracker()
        durable = await asyncio.to_thread(load_durable_ids, clients=clients, limit=cfg.durable_index,
                                          topic=cfg.kafka.generations_topic)
        publisher, checkpoint = delivery(cfg, clients, tracker, consumer, on_consumer, metrics, durable)
        await publisher.start()
        backlog, topic = clients.backlog(), cfg.kafka.prompts_topic

        def rejoin() -> None:  # the stall watchdog's second step, on the consumer thread
            listener.rejoin(consumer, lambda: clients.subscribe(consumer, [topic], listener))

        try:
            async with http_client(cfg, transport) as http:
                worker = _Worker(cfg=cfg, stop=stop, metrics=metrics, consumer=consumer,
                                 on_consumer=on_consumer, tracker=tracker, checkpoint=checkpoint,
                                 publisher=publisher, http=http, durable=durable, backlog=backlog,
                                 rejoin=rejoin)
                listener = Rebalance(checkpoint=checkpoint, cancel=worker.cancel_threadsafe,
                                     hold=worker.hold)
                await on_consumer(clients.subscribe, consumer, [cfg.kafka.prompts_topic], listener)
                async with reporting(cfg, clients if status else None, pool=worker.pool,
                                     auto=worker.client.auto, prompts_done=lambda: worker.finished,
                                     prompts_in_flight=lambda: len(worker.tasks)):
                    return await worker.run()
        finally:
            backlog.close()
    finally:
        on_consumer.shutdown(wait=True)


class _Worker:
    """Poll → dispatch → publish → commit, until stopped, drained or idle."""

    def __init__(self, *, cfg: WorkerConfig, stop: StopSignal, metrics: WorkerMetrics, consumer: Consumer,
                 on_consumer: OnThread, tracker: OffsetTracker, checkpoint: GenerateCheckpoint,
                 publisher: Publisher, http: httpx.AsyncClient, durable: DurableIds | None = None,
                 backlog: Backlog, rejoin: Callable[[], None]) -> None:
        self.cfg = cfg
        self.stop = stop
        self.metrics = metrics
        self.consumer = consumer
        self.on_consumer = on_consumer
        self.tracker = tracker
        self.checkpoint = checkpoint
        self.publisher = publisher
        self.backlog = backlog
        self.durable = durable if durable is not None else DurableIds(limit=0)
        self.skipped = 0  # prompts whose generations were durable already
        self.partly = 0  # prompts of which only the samples not durable yet were generated
        self.loop = asyncio.get_running_loop()
        self.pool = ServerPool(client=http, urls=cfg.sglang_urls, eject_after=cfg.eject_after,
                               probe_interval=cfg.probe_interval, on_change=self._server_changed,
                               engine=cfg.engine, affinity_load=cfg.affinity_load, on_route=metrics.routed)
        for server in self.pool.servers:
            self._server_changed(server)
        self.client = InferenceClient(
            pool=self.pool, http=http, concurrency=in_flight(cfg, self.pool, http, metrics),
            max_attempts=cfg.max_attempts, backoff=cfg.retry_backoff, backoff_max=cfg.retry_backoff_max,
            on_request=self._request_done)
        self.vocab = VocabSizes(fixed=cfg.vocab_size, from_tokenizer=cfg.check_vocab,
                                trust_remote_code=cfg.trust_remote_code, pool=self.pool, http=http)
        self.messages = PromptMessages(cfg=cfg, client=self.client, vocab=self.vocab, metrics=metrics,
                                       models=ServerModels(pool=self.pool))
        self.tasks: dict[asyncio.Task[None], tuple[TopicPartition, int]] = {}  # task → (partition, weight)
        self.generating: dict[str, asyncio.Event] = {}  # prompt id → set when its newest copy's task is done
        self.generated_by: dict[asyncio.Task[None], tuple[str, asyncio.Event]] = {}
        self.used = 0
        self.finished = 0
        self.failure: BaseException | None = None
        self.idle = IdleClock(seconds=cfg.exit_when_idle)
        self.watchdog = StallWatchdog(stage="generate", after=cfg.stall_seconds, rejoin=rejoin,
                                      count=lambda action: metrics.stall_recoveries.labels(action).inc())
        self.progress = ProgressLine(stage="generate", unit="prompts", seconds=cfg.progress_seconds)
        self.stall = StallGuard(after=cfg.session_timeout or SESSION_TIMEOUT_MS / 1000)
        self.stale_dropped = 0  # results of partitions that moved while the worker stood still
        self.hold = SettleHold(seconds=cfg.settle_seconds)
        self.budget = states_budget(cfg.capture, worker_id=cfg.worker_id)

    async def run(self) -> int:
        """Run the loop; then cancel what did not drain, commit what finished, close the clients.

        Raises:
            ConfigError: a configuration problem stopped the worker (e.g. a tokenizer it cannot
                load); the prompt that met it was neither dead-lettered nor committed.
            WorkerError: a failure stopped the worker (what had finished was committed first).
        """
        try:  # every server answers once (within --connect-timeout) before the group is joined
            await reach_servers(self.pool, timeout=self.cfg.kafka.connect_timeout, stop=self.stop)
            if self.cfg.capture is not None:  # every server captures what the run asks, where it reads
                await self.client.start_capture(self.cfg.capture)
            await self._loop()
        except Exception as exc:
            self.failure = exc
        finally:
            await self._shutdown()
            await self.pool.close()
        if self.skipped:
            log.info("skipped %d prompts whose generations were durable already", self.skipped)
        if self.partly:
            log.info("generated only the missing samples of %d prompts (the others were durable already)",
                     self.partly)
        if self.stale_dropped:
            log.info("dropped the results of %d prompts whose partitions moved while the worker stood still",
                     self.stale_dropped)
        if isinstance(self.failure, (ConfigError, StopRequestedError, StageStalledError, StoreError)):
            raise self.failure
        if self.failure is not None:
            raise WorkerError(f"generate worker failed: {self.failure!r}") from self.failure
        return self.finished

    async def _loop(self) -> None:
        """Poll → dispatch → commit, until stopped or idle.

        Once stopped, keep polling (everything paused) and committing while the in-flight work
        drains, so the member still takes part in rebalances; return when drained or out of time.
        """
        cfg = self.cfg
        last_commit = time.monotonic()
        changes = self.tracker.changes
        drain_until: float | None = None
        while True:
            if self.stop.is_set():
                if drain_until is None:
                    drain_until = time.monotonic() + cfg.drain_seconds
                    log.info("stopping: draining %d in-flight prompts (up to %.0fs)", len(self.tasks),
                             cfg.drain_seconds)
                if not self.tasks or time.monotonic() >= drain_until or not self.pool.in_rotation:
                    return  # (with no server in rotation, what is in flight cannot finish: do not wait)
            room = self.client.window - self.used if drain_until is None else 0
            if self.budget is not None and room > 0:  # over the states budget: 0 (every partition paused)
                room = await self.budget.room(room)
            self.stall.tick()
            batch = await self.on_consumer(self._poll, room)
            if self.budget is not None:
                self.budget.took(sum(len(records) for records in batch.values()))
            for tp, records in batch.items():
                for rec in records:
                    if drain_until is not None:
                        break  # not started, so never committed: the next owner reads it again
                    epoch = self.tracker.start(tp, rec.offset)
                    if epoch is not None:
                        self._dispatch(rec, Done(tp, rec.offset, epoch))
            now = time.monotonic()
            busy = bool(batch or self.tasks) or changes != self.tracker.changes
            changes = self.tracker.changes
            if now - last_commit >= cfg.commit_interval:
                await self.checkpoint.commit()
                last_commit = now
                self.metrics.in_flight_requests.set(self.client.in_flight)
                self.metrics.commit_lag.set(self.tracker.lag())
            if self.idle.observe(now, busy=busy):  # caught up? (on the consumer thread: broker round trips)
                lag = await self.on_consumer(group_lag, self.consumer, self.backlog, group=cfg.group_id,
                                             topics=[cfg.kafka.prompts_topic])
                self.idle.probed(lag, now)
            if self.progress.due(now):  # its lag is a broker round trip too, on the consumer thread
                lag = await self.on_consumer(consumer_lag, self.consumer)
                skipped = f"{self.skipped:,} of them skipped: durable already" if self.skipped else ""
                self.progress.report(done=self.finished, lag=lag, pending=len(self.tasks), now=now,
                                     detail=skipped)
            if self.idle.expired(now):
                break

    def _poll(self, room: int) -> Mapping[TopicPartition, Sequence[Record]]:
        """On the consumer thread: pause or resume by the window and the settle hold, poll, load commits."""
        consumer = self.consumer
        paused = consumer.paused()  # before held(): the listener holds a new partition, then pauses it
        held = self.hold.held()
        if room <= 0:
            consumer.pause(*consumer.assignment())
        else:
            if held:  # the listener paused them already; again in case a fetch raced it
                consumer.pause(*(held & consumer.assignment()))
            resume(consumer, paused - held)  # (and kafka-python's parked batches: issue 26, core.resume)
        try:
            batch = consumer.poll(timeout_ms=POLL_MS, max_records=max(1, min(room, 500)))
        except KafkaError as exc:  # kafka-python lets connection errors of a group rejoin escape poll()
            if not exc.retriable:
                raise
            log.warning("poll failed (%r); polling again while the client reconnects", exc)
            time.sleep(POLL_MS / 1000)
            batch = {}
        self.watchdog.observe(consumer, batch)
        self.checkpoint.load_committed()
        return batch

    def _dispatch(self, rec: Record, done: Done) -> None:
        try:
            prompt: dict[str, Any] | None = PROMPT.decode(rec.value or b"")
            problem = invalid_reason(prompt)  # type: ignore[arg-type]
            kind = "invalid_prompt"
        except SchemaError as exc:
            unknown = isinstance(exc, UnknownSchemaError)  # a newer writer: keep it to re-drive
            prompt, problem, kind = None, str(exc), "unknown_schema" if unknown else "undecodable_prompt"
        weight = prompt["num_samples"] if prompt is not None and problem is None else 1
        generating: asyncio.Event | None = None  # set when this prompt's task is done
        if problem is not None:
            coro = self._finish(rec, done, [self.messages.dead_letter(rec, kind, problem, 0, None)])
        elif self.durable.covers(prompt):  # type: ignore[arg-type]
            self.skipped += 1  # published again (a restarted producer): its records are durable
            coro = self._finish(rec, done, [])
        else:
            pid = str(prompt["prompt_id"])  # type: ignore[index]
            earlier = self.generating.get(pid)  # a copy of a prompt in flight waits for it (below)
            generating = self.generating[pid] = asyncio.Event()
            coro = (self._process(rec, done, prompt) if earlier is None  # type: ignore[arg-type]
                    else self._after(earlier, rec, done, prompt))  # type: ignore[arg-type]
        task = self.loop.create_task(coro)
        if generating is not None:
            self.generated_by[task] = (pid, generating)
        self.tasks[task] = (done.tp, weight)
        self.used += weight
        self.metrics.in_flight.inc()
        task.add_done_callback(self._task_done)

    async def _after(self, earlier: asyncio.Event, rec: Record, done: Done, prompt: dict[str, Any]) -> None:
        """A copy of a prompt in flight (``produce --restart``, a re-drive): generated if that one failed.

        Its copies share a key, so they are in one partition, this one later: waiting holds its
        offset behind the first's, which the watermark commits first anyway.
        """
        await earlier.wait()
        if self.durable.covers(prompt):
            self.skipped += 1
            await self._finish(rec, done, [])
        else:  # the first one failed (a dead letter) or was cancelled: this copy is generated
            await self._process(rec, done, prompt)

    async def _process(self, rec: Record, done: Done, prompt: dict[str, Any]) -> None:
        missing = self.durable.missing(prompt)  # a prompt published again with more samples: the new ones
        if len(missing) < prompt["num_samples"]:
            self.partly += 1
        await self._finish(rec, done, await self.messages.for_prompt(rec, prompt, missing))

    async def _finish(self, rec: Record, done: Done, messages: list[Message]) -> None:
        if await self.stall.settle() and not self.tracker.is_current(done.tp, done.epoch):
            self.stale_dropped += 1  # its partition moved while we stood still: the new owner does it
            return
        await self.publisher.publish(messages, done, functools.partial(self.messages.rejected, rec))
        generated = generation_ids(messages, self.cfg.kafka.generations_topic)
        if not self.cfg.exactly_once:
            # acknowledged, so durable. Queued for a transaction, they are not yet: the checkpoint
            # notes them once it committed (an aborted one's prompts, read again after a
            # rebalance, must not be skipped as done).
            self.durable.add_all(generated)
        published = len(generated)
        self.metrics.records_published.inc(published)
        self.finished += 1

    async def _shutdown(self) -> None:
        """Cancel what did not drain in time, commit what finished, close (in that order)."""
        late = list(self.tasks)
        if late:
            log.info("cancelling %d prompts still in flight", len(late))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        try:  # what finished is safe to commit, even when the worker is stopping on a failure
            await self.checkpoint.commit()
        except Exception as exc:
            log.error("final commit failed (%r)", exc)
            self.failure = self.failure or exc
        self.checkpoint.closing = True  # the revocation close() reports is this member leaving
        await self.on_consumer(self.consumer.close)
        await self.publisher.close()

    def cancel_threadsafe(self, partitions: set[TopicPartition]) -> None:
        """From any thread: cancel the in-flight work of partitions this member no longer owns."""
        self.loop.call_soon_threadsafe(self._cancel, partitions)

    def _cancel(self, partitions: set[TopicPartition]) -> None:
        doomed = [task for task, (tp, _w) in self.tasks.items() if tp in partitions]
        if doomed:
            log.info("cancelling %d in-flight prompts of revoked partitions", len(doomed))
        for task in doomed:
            task.cancel()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        _tp, weight = self.tasks.pop(task)
        pid, generating = self.generated_by.pop(task, (None, None))
        if generating is not None:
            generating.set()  # (also when cancelled: a waiting copy then decides for itself)
            if self.generating.get(pid) is generating:  # type: ignore[arg-type]
                del self.generating[pid]  # type: ignore[arg-type]
        self.used -= weight
        self.metrics.in_flight.dec()
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, (ConfigError, StoreError)):  # said in one line by the CLI
                log.error("prompt task failed; stopping", exc_info=exc)
            self.failure = self.failure or task.exception()
            self.stop.set()

    def _request_done(self, outcome: str, seconds: float) -> None:
        self.metrics.requests.labels(outcome).inc()
        if outcome == "ok":
            self.metrics.request_seconds.observe(seconds)

    def _server_changed(self, server: Server) -> None:
        self.metrics.server_outstanding.labels(server.url).set(server.outstanding)
        self.metrics.server_healthy.labels(server.url).set(1 if server.healthy else 0)
