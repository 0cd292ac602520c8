"""How a generate worker's parts are built: publisher and checkpoint, HTTP client, limits."""

from __future__ import annotations

import httpx

from eaglefeed.consumers.generate.checkpoint import (
    GenerateCheckpoint,
    OnThread,
    TransactionalGenerateCheckpoint,
)
from eaglefeed.consumers.generate.durable import DurableIds, generation_ids
from eaglefeed.consumers.generate.inference import (
    AutoConcurrency,
    LimitSettings,
    ServerPool,
    make_http_client,
)
from eaglefeed.consumers.generate.offsets import OffsetTracker
from eaglefeed.consumers.generate.publish import AckedPublisher, Publisher, TransactionalPublisher
from eaglefeed.core.clients import Clients, Consumer
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.metrics import WorkerMetrics

PUBLISH_LINGER_MS = 50
"""How long the at-least-once worker's producer gathers generation records into one request.

The shared default (5 ms, ``eaglefeed.core.kafka.make_producer``) is for bursts; a worker publishes
a prompt's records as its answer arrives, one prompt every few ms, so at 5 ms nearly every record
went as a produce request of its own, each costing the broker, the worker's network thread and the
sink's fetches their per-request CPU, on the cores the pipeline shares (docs/BENCHMARKS.md, "Pipeline
vs direct on a real vLLM"). 50 ms delays each prompt's durability by at most that, which the request
window's second half (2 × concurrency, ``loop``) absorbs without idling a request slot."""


def delivery(cfg: WorkerConfig, clients: Clients, tracker: OffsetTracker, consumer: Consumer,
              on_consumer: OnThread, metrics: WorkerMetrics,
              durable: DurableIds) -> tuple[Publisher, GenerateCheckpoint]:
    """The publisher and checkpoint of the delivery mode: acked (at least once) or transactional.

    ``durable`` learns a transaction's generation ids once it committed (the acked mode's are
    noted by the loop, once acknowledged).
    """
    if cfg.exactly_once:
        transactional_id = f"{cfg.group_id}-{cfg.worker_id}"
        txn = TransactionalPublisher(new_producer=lambda: clients.producer(transactional_id=transactional_id),
                                     deadline=cfg.transaction_deadline)
        topic = cfg.kafka.generations_topic
        return txn, TransactionalGenerateCheckpoint(
            tracker=tracker, consumer=consumer, on_consumer=on_consumer, publisher=txn,
            on_transaction=lambda outcome: metrics.transactions.labels(outcome).inc(),
            on_committed=lambda batch: durable.add_all(
                key for pending in batch for key in generation_ids(pending.messages, topic)))
    checkpoint = GenerateCheckpoint(tracker=tracker, consumer=consumer, on_consumer=on_consumer)
    producer = clients.producer(linger_ms=PUBLISH_LINGER_MS)
    return AckedPublisher(producer=producer, on_durable=checkpoint.finished), checkpoint


def http_client(cfg: WorkerConfig, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    """The HTTP client to the inference servers: ``transport`` when given (tests), else aiohttp's."""
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
    timeout = httpx.Timeout(cfg.request_timeout, connect=min(10.0, cfg.request_timeout))
    if transport is not None:
        return httpx.AsyncClient(transport=transport, timeout=timeout, headers=headers)
    # + connections for info reads, health probes and load readings
    in_flight = cfg.concurrency or LimitSettings.maximum * len(cfg.sglang_urls)
    return make_http_client(connections=in_flight + 8 + len(cfg.sglang_urls), timeout=timeout,
                            headers=headers)


def in_flight(cfg: WorkerConfig, pool: ServerPool, http: httpx.AsyncClient,
              metrics: WorkerMetrics) -> int | AutoConcurrency:
    """What bounds the requests in flight: ``--concurrency N``, or (``auto``) every server's own limit."""
    if cfg.concurrency is not None:
        return cfg.concurrency
    return AutoConcurrency(pool=pool, http=http, metrics=metrics, report_seconds=cfg.progress_seconds)
