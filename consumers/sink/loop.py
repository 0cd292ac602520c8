"""``eaglefeed sink``: generations topic → deduplicated Parquet segments, exactly once.

How each segment becomes durable, and in which order, is told in ``eaglefeed.consumers.sink.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.checkpoint import CrashHook, SinkCheckpoint, SinkRebalance, SinkSummary
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.consumers.sink.status_report import SinkStatusReport, status_sender
from eaglefeed.core.clients import Clients, Consumer, KafkaClients
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.lifecycle import StopFlag, StopSignal
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.core.progress import ProgressLine
from eaglefeed.core.stage import IdleClock, Upstream, consumer_lag, group_lag, stage_metrics, upstream_lag
from eaglefeed.core.watchdog import StallWatchdog
from eaglefeed.dataset import claim_output

POLL_MS = 200
MAX_POLL_RECORDS = 500
FETCH_MIN_BYTES = 256 * 1024
"""What the broker gathers before it answers a fetch (or ``POLL_MS`` passed; kafka-python's default
is 1 byte). The workers publish a few records at a time, so at 1 byte the sink sent a fetch for
nearly every record, and it and the broker spent their CPU per request, not per record
(docs/BENCHMARKS.md, "Pipeline vs direct on a real vLLM"). The sink holds records for
``--flush-seconds`` anyway: waiting up to one poll longer for them changes nothing it writes."""


def run_sink(cfg: SinkConfig, *, stop: StopSignal | None = None, registry: CollectorRegistry | None = None,
             clients: Clients | None = None) -> SinkSummary:
    """Run the sink until stopped (or caught up for ``cfg.exit_when_idle`` seconds: see ``IdleClock``).

    Args:
        cfg: the sink's settings.
        stop: ask for a clean stop (what is buffered is written first).
        registry: where the metrics go (a fresh one by default).
        clients: where the Kafka clients come from (the real broker of ``cfg.kafka`` by default).

    Returns:
        the counts of what this run wrote.
    """
    stop = stop or StopSignal()
    report_status = clients is None  # to the real broker only, as the workers do
    clients = clients or KafkaClients(kafka=cfg.kafka)
    topic = cfg.kafka.generations_topic
    with stage_metrics(SinkMetrics.create, kafka=cfg.kafka, stage="sink", group=cfg.group_id, topic=topic,
                       port=cfg.metrics_port, registry=registry) as metrics:
        if not clients.wait_for_topics([topic], stop, cfg.exit_when_idle):
            return SinkSummary()  # stopped before the producer created the topic
        # Claimed once the topic exists: a mistyped --topic-prefix leaves no folder owned by its group.
        claim_output(Path(cfg.output), topic=topic, group_id=cfg.group_id)  # one owner per dataset
        extra: dict[str, Any] = {"group_instance_id": cfg.group_instance_id} if cfg.group_instance_id else {}
        if cfg.session_timeout:
            extra["session_timeout_ms"] = int(cfg.session_timeout * 1000)
        consumer = clients.consumer(cfg.group_id, max_poll_records=MAX_POLL_RECORDS,
                                    fetch_min_bytes=FETCH_MIN_BYTES, fetch_max_wait_ms=POLL_MS, **extra)
        producer = clients.producer()
        crash = CrashHook(cfg.crash_at)
        buffers = Buffers(cfg=cfg, metrics=metrics)
        ids = SinkIds(root=Path(cfg.output), metrics=metrics)  # one owner of the id index: see its module
        segments = SegmentBuilder(ids=ids, producer=producer, dead_letter_topic=cfg.kafka.dead_letter_topic,
                                  metrics=metrics, crash=crash)
        checkpoint = SinkCheckpoint(root=Path(cfg.output), consumer=consumer, buffers=buffers,
                                    segments=segments, ids=ids, metrics=metrics, crash=crash)
        listener = SinkRebalance(checkpoint)
        clients.subscribe(consumer, [topic], listener)

        def rejoin() -> None:  # the watchdog's second step; unsubscribe() calls no listener, so:
            listener.on_partitions_revoked(consumer.assignment())  # what is buffered is written
            consumer.unsubscribe()
            clients.subscribe(consumer, [topic], listener)

        watchdog = StallWatchdog(stage="sink", after=cfg.stall_seconds, rejoin=rejoin,
                                 count=lambda action: metrics.stall_recoveries.labels(action).inc())
        backlog = clients.backlog()
        status = None
        if report_status:
            status = SinkStatusReport(cfg=cfg, sender=status_sender(cfg, clients),
                                      buffered=lambda: buffers.total() + checkpoint.writing,
                                      rows_written=lambda: checkpoint.summary.rows_written)
        clean = False
        try:
            progress = ProgressLine(stage="sink", unit="records", seconds=cfg.progress_seconds,
                                    pending_word="buffered")
            _consume(consumer, buffers, checkpoint, listener, stop=stop,
                     idle=IdleClock(seconds=cfg.exit_when_idle),
                     lag=lambda: group_lag(consumer, backlog, group=cfg.group_id, topics=[topic]),
                     upstream=lambda: upstream_lag(backlog, group=cfg.upstream_group,
                                                   topic=cfg.kafka.prompts_topic),
                     watchdog=watchdog, progress=progress, status=status)
            clean = True
        finally:
            try:
                consumer.close()  # runs on_partitions_revoked: whatever is still buffered is written
            finally:
                checkpoint.close()
                producer.close()
                backlog.close()
                if status is not None:
                    status.close(clean=clean)
        listener.raise_failure()  # one met while closing
        return checkpoint.summary


def _consume(consumer: Consumer, buffers: Buffers, checkpoint: SinkCheckpoint, listener: SinkRebalance, *,
             stop: StopFlag,
             idle: IdleClock, lag: Callable[[], int | None], upstream: Callable[[], Upstream],
             watchdog: StallWatchdog, progress: ProgressLine, status: SinkStatusReport | None = None) -> None:
    """Poll → buffer → write what is due → commit, until stopped or caught up; then write everything.

    Caught up includes upstream: the sink is not finished while generate workers still hold
    prompts (asked first, see :func:`upstream_lag`); it exits with them left only when the
    generate group has no member, and says so in its summary.
    """
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=POLL_MS)
        listener.raise_failure()  # a claim or write a rebalance callback could not make: stop here
        watchdog.observe(consumer, batch)
        for tp, records in batch.items():
            buffers.add(tp, records)
        now = idle.now()
        busy = bool(batch)  # what is buffered does not hold the exit back: the final flush writes it
        for tp, messages in buffers.take_due(now):
            checkpoint.write(tp, messages)
        checkpoint.commit()
        if not batch:
            checkpoint.commit_drained()  # past an exactly-once worker's last commit marker
        if idle.observe(now, busy=busy):
            ahead = upstream()
            idle.probed(lag(), now, upstream=ahead)
        if status is not None:
            status.tick(now)  # what it holds counts as progress in `eaglefeed status`
        if progress.due(now):
            _report(progress, checkpoint.summary, lag=consumer_lag(consumer),
                    buffered=buffers.total() + checkpoint.writing, now=now)
        if idle.expired(now):
            checkpoint.summary.lag_at_exit = idle.lag
            if idle.upstream is not None and idle.upstream.stalled:
                checkpoint.summary.upstream_stalled = idle.upstream
            break
    for tp, messages in buffers.take_due(idle.now(), force=True):
        checkpoint.write(tp, messages)
    checkpoint.drain()


def _report(progress: ProgressLine, summary: SinkSummary, *, lag: int | None, buffered: int,
            now: float) -> None:
    """A progress line in records read and handled (its lag counts records), with the rows written."""
    handled = summary.rows_written + summary.duplicates_dropped + summary.dead_lettered
    detail = f"{summary.rows_written:,} rows written" + (
        f", {summary.duplicates_dropped:,} duplicates dropped" if summary.duplicates_dropped else "")
    progress.report(done=handled, lag=lag, pending=buffered, detail=detail, now=now)
