"""``eaglefeed sink``: generations topic → deduplicated Parquet segments, exactly once.

How each segment becomes durable, and in which order, is told in ``consumers.sink.checkpoint``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from consumers.sink.buffers import Buffers
from consumers.sink.checkpoint import Checkpoint, SinkRebalance, SinkSummary
from consumers.sink.crash import CrashHook
from consumers.sink.segments import SegmentBuilder
from eaglefeed.config import SinkConfig
from eaglefeed.kafka import Clients, KafkaClients
from eaglefeed.lag import LagReporter
from eaglefeed.lifecycle import StopSignal
from eaglefeed.metrics import LagMetrics, SinkMetrics, serve_metrics

log = logging.getLogger(__name__)
POLL_MS = 200
MAX_POLL_RECORDS = 500


def run_sink(cfg: SinkConfig, *, stop: StopSignal | None = None, registry: CollectorRegistry | None = None,
             clients: Clients | None = None) -> SinkSummary:
    """Run the sink until stopped (or idle for ``cfg.exit_when_idle`` seconds).

    Args:
        cfg: the sink's settings.
        stop: ask for a clean stop (buffered messages are written first).
        registry: where the metrics go (a fresh one by default).
        clients: where the Kafka clients come from (the real broker of ``cfg.kafka`` by default).

    Returns:
        the counts of what this run wrote.
    """
    registry = registry or CollectorRegistry()
    metrics = SinkMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    lag = None
    if cfg.metrics_port is not None:  # consumer lag of the sink's group, for the dashboard
        lag = LagReporter(kafka=cfg.kafka, stage="sink", group=cfg.group_id,
                          topic=cfg.kafka.generations_topic, metrics=LagMetrics.create(registry)).start()
    stop = stop or StopSignal()
    clients = clients or KafkaClients(kafka=cfg.kafka)
    if not clients.wait_for_topics([cfg.kafka.generations_topic], stop):
        return SinkSummary()  # stopped before the producer created the topic
    static = {"group_instance_id": cfg.group_instance_id} if cfg.group_instance_id else {}
    consumer = clients.consumer(cfg.group_id, max_poll_records=MAX_POLL_RECORDS, **static)
    producer = clients.producer()
    crash = CrashHook(cfg.crash_at)
    buffers = Buffers(cfg=cfg, metrics=metrics)
    segments = SegmentBuilder(root=Path(cfg.output), producer=producer,
                              dead_letter_topic=cfg.kafka.dead_letter_topic, metrics=metrics, crash=crash)
    checkpoint = Checkpoint(root=Path(cfg.output), consumer=consumer, buffers=buffers, segments=segments,
                            metrics=metrics, crash=crash)
    clients.subscribe(consumer, [cfg.kafka.generations_topic], SinkRebalance(checkpoint))
    last_activity = time.monotonic()
    try:
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=POLL_MS)
            segments.sync_index()  # after an assignment: ids other sinks wrote meanwhile
            for tp, records in batch.items():
                buffers.add(tp, records)
            now = time.monotonic()
            if batch:
                last_activity = now
            for tp, messages in buffers.take_due(now):
                checkpoint.write(tp, messages)
            checkpoint.commit()
            if cfg.exit_when_idle is not None and now - last_activity >= cfg.exit_when_idle:
                log.info("idle for %.0fs: exiting", cfg.exit_when_idle)
                break
        for tp, messages in buffers.take_due(time.monotonic(), force=True):
            checkpoint.write(tp, messages)
        checkpoint.drain()
    finally:
        try:
            consumer.close()  # runs on_partitions_revoked: whatever is still buffered is written
        finally:
            checkpoint.close()
            producer.close()
            if lag is not None:
                lag.stop()
    return checkpoint.summary
