"""``eaglefeed sink``: generations topic → deduplicated Parquet segments, exactly once.

Commit order for each segment (the manifest, not Kafka, is the source of truth):
    1. write the rows to a temp file, fsync it, rename it into ``segments/``;
    2. append the segment (with its per-partition offset range) to ``manifest.jsonl``, fsync;
    3. commit the Kafka offset one past the segment's last record (advisory).
A crash before 2 leaves a file the next owner deletes; a crash between 2 and 3 is harmless
because on assignment the sink seeks to the manifest's offsets. Rows are deduplicated by
``id``; generations are keyed by ``id``, so every copy of a row lands in the same partition
and per-partition dedup is global.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry

from consumers import shards
from eaglefeed.config import SinkConfig
from eaglefeed.deadletter import dead_letter
from eaglefeed.errors import SchemaError
from eaglefeed.kafka import make_consumer, make_producer
from eaglefeed.lifecycle import StopSignal
from eaglefeed.metrics import SinkMetrics, serve_metrics
from schemas import GENERATION

log = logging.getLogger(__name__)


@dataclass
class SinkSummary:
    """Counts of one sink run."""

    rows_written: int = 0
    duplicates_dropped: int = 0
    dead_lettered: int = 0
    segments: int = 0


@dataclass
class _Buffer:
    records: list[dict[str, Any]] = field(default_factory=list)
    first: int = -1
    last: int = -1
    nbytes: int = 0
    opened: float = 0.0


def run_sink(cfg: SinkConfig, *, stop: StopSignal | None = None,
             registry: CollectorRegistry | None = None) -> SinkSummary:
    """Run the sink until stopped (or idle for ``cfg.exit_when_idle`` seconds)."""
    registry = registry or CollectorRegistry()
    metrics = SinkMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    sink = _Sink(cfg, metrics)
    stop = stop or StopSignal()
    consumer = make_consumer(cfg.kafka, cfg.group_id, max_poll_records=1000)
    producer = make_producer(cfg.kafka)
    consumer.subscribe([cfg.kafka.generations_topic], listener=_Rebalance(sink, consumer))
    last_activity = time.monotonic()
    try:
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=200)
            for tp, records in batch.items():
                for rec in records:
                    sink.add(tp, rec, producer)
            now = time.monotonic()
            if batch:
                last_activity = now
            _commit(consumer, sink.flush_due(now))
            if cfg.exit_when_idle is not None and now - last_activity >= cfg.exit_when_idle:
                log.info("idle for %.0fs: exiting", cfg.exit_when_idle)
                break
        _commit(consumer, sink.flush_due(time.monotonic(), force=True))
        producer.flush()
    finally:
        consumer.close()
        producer.close()
    return sink.summary


class _Sink:
    def __init__(self, cfg: SinkConfig, metrics: SinkMetrics) -> None:
        self.cfg = cfg
        self.root = Path(cfg.output)
        self.metrics = metrics
        self.summary = SinkSummary()
        self.buffers: dict[TopicPartition, _Buffer] = {}
        self.seen: dict[TopicPartition, set[str]] = {}

    def open_partition(self, tp: TopicPartition) -> int | None:
        """Prepare ``tp``: drop uncommitted files, load written ids; return the resume offset."""
        events = shards.read_manifest(self.root)
        live = shards.live_segments(events)
        prefix = shards.segment_prefix(tp.topic, tp.partition)
        for rel in shards.discard_uncommitted(self.root, live, prefix):
            log.info("removed uncommitted segment %s", rel)
        mine = [rel for rel in live if rel.split("/", 1)[1].startswith(prefix)]
        self.seen[tp] = set(shards.read_ids(self.root, mine))
        self.buffers[tp] = _Buffer()
        return shards.resume_offsets(events).get(f"{tp.topic}:{tp.partition}")

    def close_partition(self, tp: TopicPartition) -> None:
        """Write what is buffered for ``tp`` (no Kafka commit: the manifest holds the offsets)."""
        if tp in self.buffers:
            self._flush(tp)
        self.buffers.pop(tp, None)
        self.seen.pop(tp, None)

    def add(self, tp: TopicPartition, rec: Any, producer: Any) -> None:
        buf = self.buffers.get(tp)
        if buf is None:
            return  # not ours any more
        if buf.last < 0:
            buf.first, buf.opened = rec.offset, time.monotonic()
        buf.last = rec.offset
        try:
            record = GENERATION.decode(rec.value)
            _validate(record)
        except (SchemaError, ValueError) as exc:
            kind = "undecodable_generation" if isinstance(exc, SchemaError) else "invalid_generation"
            producer.send(self.cfg.kafka.dead_letter_topic, key=rec.key, value=dead_letter(
                stage="sink", kind=kind, message=str(exc), topic=rec.topic,
                partition=rec.partition, offset=rec.offset, key=rec.key, value=rec.value))
            self.summary.dead_lettered += 1
            self.metrics.dead_letters.labels(kind).inc()
            return
        seen = self.seen[tp]
        if record["id"] in seen:
            self.summary.duplicates_dropped += 1
            self.metrics.duplicates_dropped.inc()
            return
        seen.add(record["id"])
        buf.records.append(record)
        buf.nbytes += 4 * (len(record["prompt_ids"]) + len(record["output_ids"])) + 512

    def flush_due(self, now: float, force: bool = False) -> dict[TopicPartition, int]:
        """Flush every buffer that is full or old enough; return offsets to commit."""
        offsets = {}
        for tp, buf in list(self.buffers.items()):
            if buf.last < 0:
                continue
            if force or len(buf.records) >= self.cfg.flush_rows or buf.nbytes >= self.cfg.flush_bytes \
                    or now - buf.opened >= self.cfg.flush_seconds:
                offsets[tp] = self._flush(tp)
        return offsets

    def _flush(self, tp: TopicPartition) -> int:
        buf = self.buffers[tp]
        started = time.perf_counter()
        entry: dict[str, Any] = {"offsets": {f"{tp.topic}:{tp.partition}": [buf.first, buf.last]},
                                 "added": []}
        if buf.records:
            markers = [_markers(r["tokenizer_id"]) for r in buf.records]
            table = shards.rows_to_table(buf.records, markers)
            name = shards.segment_name(tp.topic, tp.partition, buf.first, buf.last)
            entry["added"] = [shards.write_segment(self.root, name, table)]
        # Even an all-duplicate batch is recorded, so the manifest's offsets move past it.
        shards.append_manifest(self.root, entry)
        rows = len(buf.records)
        self.summary.rows_written += rows
        self.metrics.rows_written.inc(rows)
        if entry["added"]:
            self.summary.segments += 1
            self.metrics.segments_written.inc()
            self.metrics.bytes_written.inc(entry["added"][0]["bytes"])
        self.metrics.flush_seconds.observe(time.perf_counter() - started)
        next_offset = buf.last + 1
        self.buffers[tp] = _Buffer()
        return next_offset


class _Rebalance(ConsumerRebalanceListener):
    """On assignment seek to the manifest's offsets; on revocation write what is buffered.

    Both run on kafka-python's IO thread while the main thread waits in ``poll()``, and do
    only file IO and a local ``seek``, never a blocking consumer call.
    """

    def __init__(self, sink: _Sink, consumer: KafkaConsumer) -> None:
        self.sink = sink
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self.sink.close_partition(tp)

    def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            offset = self.sink.open_partition(tp)
            if offset is not None:
                self.consumer.seek(tp, offset)


def _commit(consumer: KafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
    if offsets:
        try:
            consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - offsets are advisory; the manifest decides
            log.warning("offset commit failed (%r); the manifest still holds the offsets", exc)


def _validate(record: dict[str, Any]) -> None:
    if not record["output_ids"]:
        raise ValueError("empty output")
    if not record["prompt_ids"]:
        raise ValueError("empty prompt")
    if record["completion_tokens"] != len(record["output_ids"]):
        raise ValueError("completion_tokens does not match output_ids")
    if record["prompt_tokens"] != len(record["prompt_ids"]):
        raise ValueError("prompt_tokens does not match prompt_ids")


@lru_cache(maxsize=16)
def _markers(tokenizer_id: str) -> shards.Markers:
    """Look up the reasoning and tool-call marker ids of a tokenizer (unknown → None)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_id)
    except Exception:  # noqa: BLE001 - a missing tokenizer only loses two flag columns
        log.warning("tokenizer %s not loadable here: has_reasoning/has_tool_call left empty", tokenizer_id)
        return shards.Markers()
    vocab: Callable[[str], int | None] = tok.get_vocab().get
    return shards.Markers(think=vocab("<think>"), tool_call=vocab("<tool_call>"))
