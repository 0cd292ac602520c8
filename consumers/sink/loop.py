"""``eaglefeed sink``: generations topic → deduplicated Parquet segments, exactly once.

Commit order for each segment (the manifest, not Kafka, is the source of truth):
    1. decode the buffered messages in bulk; send the undecodable and invalid ones to the
       dead-letter topic and wait for the broker's acknowledgement;
    2. drop the rows whose ``id`` the dataset already holds (``dataset.ids``);
    3. write the rows to a temp file, fsync it, rename it into ``segments/``;
    4. append the segment (with its per-partition offset range) to ``manifest.jsonl``, fsync;
    5. commit the Kafka offset one past the segment's last record (advisory).
Steps 3-4 run on a writer thread (``consumers.sink.writer``) in submission order, while
the main thread polls and decodes the next segment. A crash before 4 leaves at most a file
that the next owner of the partition deletes (and dead letters that are sent again); a crash
between 4 and 5 is harmless because on assignment the sink seeks to the manifest's offsets.
The id index covers the whole dataset, compacted shards included, and is brought up to date
whenever partitions are assigned.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry

from consumers.sink.writer import SegmentWriter, WriteJob
from dataset import manifest, shards
from dataset.ids import IdIndex
from dataset.markers import markers_for
from eaglefeed.config import SinkConfig
from eaglefeed.deadletter import dead_letter
from eaglefeed.kafka import make_consumer, make_producer, subscribe, wait_for_topics
from eaglefeed.lag import LagReporter
from eaglefeed.lifecycle import StopSignal
from eaglefeed.metrics import LagMetrics, SinkMetrics, serve_metrics
from schemas.columnar import GenerationBatch, decode_generations

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
    """Raw messages of one partition since its last flush (decoded in bulk when written)."""

    messages: list[Any] = field(default_factory=list)
    nbytes: int = 0
    opened: float = 0.0


def run_sink(cfg: SinkConfig, *, stop: StopSignal | None = None,
             registry: CollectorRegistry | None = None) -> SinkSummary:
    """Run the sink until stopped (or idle for ``cfg.exit_when_idle`` seconds)."""
    registry = registry or CollectorRegistry()
    metrics = SinkMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    lag = None
    if cfg.metrics_port is not None:  # consumer lag of the sink's group, for the dashboard
        lag = LagReporter(kafka=cfg.kafka, stage="sink", group=cfg.group_id,
                          topic=cfg.kafka.generations_topic, metrics=LagMetrics.create(registry)).start()
    stop = stop or StopSignal()
    if not wait_for_topics(cfg.kafka, [cfg.kafka.generations_topic], stop=stop):
        return SinkSummary()  # stopped before the producer created the topic
    static = {"group_instance_id": cfg.group_instance_id} if cfg.group_instance_id else {}
    consumer = make_consumer(cfg.kafka, cfg.group_id, max_poll_records=500, **static)
    producer = make_producer(cfg.kafka)
    sink = _Sink(cfg, metrics, producer)
    subscribe(consumer, [cfg.kafka.generations_topic], listener=_Rebalance(sink, consumer))
    last_activity = time.monotonic()
    try:
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=200)
            sink.sync_index()
            for tp, records in batch.items():
                sink.add(tp, records)
            now = time.monotonic()
            if batch:
                last_activity = now
            sink.flush_due(now)
            sink.commit(consumer)
            if cfg.exit_when_idle is not None and now - last_activity >= cfg.exit_when_idle:
                log.info("idle for %.0fs: exiting", cfg.exit_when_idle)
                break
        sink.flush_due(time.monotonic(), force=True)
        sink.writer.wait()
        sink.commit(consumer)
    finally:
        try:
            consumer.close()  # runs on_partitions_revoked: whatever is still buffered is written
        finally:
            sink.writer.close()
            producer.close()
            if lag is not None:
                lag.stop()
    return sink.summary


class _Sink:
    def __init__(self, cfg: SinkConfig, metrics: SinkMetrics, producer: Any) -> None:
        self.cfg = cfg
        self.root = Path(cfg.output)
        self.metrics = metrics
        self.producer = producer
        self.summary = SinkSummary()
        self.buffers: dict[TopicPartition, _Buffer] = {}
        self.index = IdIndex()
        self.index_stale = True
        self.crash = _CrashHook(cfg.crash_at)
        self.writer = SegmentWriter(self.root, crash=self.crash)

    # --- partitions -------------------------------------------------------------------
    def open_partition(self, tp: TopicPartition) -> int | None:
        """Prepare ``tp``: drop files never committed; return the manifest's resume offset."""
        self.writer.wait()  # a write of ours for tp still in flight would move its offsets
        events = manifest.read_manifest(self.root)
        prefix = shards.segment_prefix(tp.topic, tp.partition)
        for rel in shards.discard_uncommitted(self.root, manifest.ever_added(events), prefix):
            log.info("removed uncommitted segment %s", rel)
        self.buffers[tp] = _Buffer()
        self.index_stale = True  # another sink may have written ids since we last looked
        return manifest.resume_offsets(events).get(f"{tp.topic}:{tp.partition}")

    def close_partition(self, tp: TopicPartition, *, write: bool) -> None:
        """Give up ``tp``; write what is buffered unless the partition was lost to another owner."""
        buf = self.buffers.get(tp)
        if write and buf is not None and buf.messages:
            self._flush(tp)
            self.writer.wait()  # the next owner reads the manifest as soon as we return
        self.buffers.pop(tp, None)

    def sync_index(self) -> None:
        """Read the ids written since the last sync (after an assignment); runs on the main thread."""
        if self.index_stale:
            started = time.perf_counter()
            read = self.index.sync(self.root)
            self.index_stale = False
            self.metrics.index_ids.set(len(self.index))
            log.info("id index: %d ids (%d read in %.2fs)", len(self.index), read,
                     time.perf_counter() - started)

    # --- records ----------------------------------------------------------------------
    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        """Buffer ``records`` of ``tp`` (decoding waits for the flush, where it runs in bulk)."""
        buf = self.buffers.get(tp)
        if buf is None or not records:
            return  # not ours any more
        if not buf.messages:
            buf.opened = time.monotonic()
        buf.messages.extend(records)
        buf.nbytes += _size(records)

    def flush_due(self, now: float, force: bool = False) -> None:
        """Hand every buffer that is full or old enough to the segment writer."""
        cfg = self.cfg
        for tp in list(self.buffers):
            while len(self.buffers[tp].messages) >= cfg.flush_rows:  # full segments of exactly flush_rows
                self._flush(tp, cfg.flush_rows)
            buf = self.buffers[tp]
            due = force or buf.nbytes >= cfg.flush_bytes or now - buf.opened >= cfg.flush_seconds
            if buf.messages and due:
                self._flush(tp)
        while sum(b.nbytes for b in self.buffers.values()) > cfg.max_buffer_bytes:
            self._flush(max(self.buffers, key=lambda t: self.buffers[t].nbytes))
        waiting = [b.opened for b in self.buffers.values() if b.messages]
        self.metrics.buffered_records.set(sum(len(b.messages) for b in self.buffers.values()))
        self.metrics.commit_lag_seconds.set(now - min(waiting) if waiting else 0.0)

    def commit(self, consumer: KafkaConsumer | None) -> dict[TopicPartition, int]:
        """Count the segments written since the last call and commit their offsets to Kafka.

        The commit is advisory (the manifest already holds the offsets). Returns the offsets.
        """
        offsets: dict[TopicPartition, int] = {}
        for job in self.writer.finished():
            offsets[job.key] = job.next_offset
            self._count(job)
        if not offsets or consumer is None:
            return offsets
        try:
            consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - offsets are advisory; the manifest decides
            log.warning("offset commit failed (%r); the manifest still holds the offsets", exc)
        self.crash("after_commit")
        return offsets

    # --- one segment ------------------------------------------------------------------
    def _flush(self, tp: TopicPartition, count: int | None = None) -> None:
        """Steps 1-2 for the first ``count`` (default all) buffered messages of ``tp``; queue 3-4."""
        buf = self.buffers[tp]
        started = time.perf_counter()
        messages, rest = buf.messages[:count], buf.messages[len(buf.messages) if count is None else count:]
        first, last = messages[0].offset, messages[-1].offset
        rows, kinds = self._decode(messages)
        # Everything that can fail comes before the ids are claimed: a claimed id counts as written.
        markers = {t: markers_for(t) for t in {r["tokenizer_id"] for r in rows.rows}}
        fresh = self.index.claim([r["id"] for r in rows.rows])
        keep = [i for i, new in enumerate(fresh) if new]
        duplicates = len(rows) - len(keep)
        rows = rows.select(keep)
        # Even a flush without rows is recorded, so the manifest's offsets move past it.
        event: dict[str, Any] = {"kind": "flush", "offsets": {f"{tp.topic}:{tp.partition}": [first, last]},
                                 "duplicates": duplicates, "dead_lettered": sum(kinds.values())}
        if kinds:
            event["dead_letter_kinds"] = dict(kinds)
        job = WriteJob(key=tp, event=event, next_offset=last + 1, started=started)
        if len(rows):
            job.rows, job.name = rows, shards.segment_name(tp.topic, tp.partition, first, last)
            job.markers = markers
        self.buffers[tp] = _Buffer(messages=rest, nbytes=_size(rest), opened=buf.opened)
        self.writer.submit(job)

    def _decode(self, messages: list[Any]) -> tuple[GenerationBatch, Counter[str]]:
        """Decode and validate; dead-letter the failures (acknowledged before we go on)."""
        decoded = decode_generations([m.value for m in messages])
        invalid = invalid_rows(decoded.batch)
        failures = [(i, "undecodable_generation", str(exc)) for i, exc in decoded.errors]
        failures += [(decoded.index[r], "invalid_generation", reason) for r, reason in invalid]
        if not failures:
            return decoded.batch, Counter()
        kinds: Counter[str] = Counter()
        sent = []
        for i, kind, message in sorted(failures):
            rec = messages[i]
            sent.append(self.producer.send(self.cfg.kafka.dead_letter_topic, key=rec.key, value=dead_letter(
                stage="sink", kind=kind, message=message, topic=rec.topic, partition=rec.partition,
                offset=rec.offset, key=rec.key, value=rec.value)))
            kinds[kind] += 1
            self.metrics.dead_letters.labels(kind).inc()
        self.producer.flush()
        for future in sent:  # flush() does not raise: a lost dead letter must stop the flush
            future.get(timeout=0)
        self.crash("after_dead_letter")
        bad_rows = {r for r, _reason in invalid}
        keep = [r for r in range(len(decoded.batch)) if r not in bad_rows]
        return decoded.batch.select(keep), kinds

    def _count(self, job: WriteJob) -> None:
        event = job.event
        rows = sum(seg["rows"] for seg in event["added"])
        self.summary.rows_written += rows
        self.summary.duplicates_dropped += event["duplicates"]
        self.summary.dead_lettered += event["dead_lettered"]
        self.metrics.rows_written.inc(rows)
        self.metrics.duplicates_dropped.inc(event["duplicates"])
        for seg in event["added"]:
            self.summary.segments += 1
            self.metrics.segments_written.inc()
            self.metrics.bytes_written.inc(seg["bytes"])
        self.metrics.flush_seconds.observe(time.perf_counter() - job.started)


def _size(records: list[Any]) -> int:
    return sum(len(r.value or b"") + 64 for r in records)  # 64: per-message overhead


def invalid_rows(batch: GenerationBatch) -> list[tuple[int, str]]:
    """Rows that must not become training rows, with the reason (token counts, empty ids, bad ids)."""
    if not len(batch):
        return []
    plen, olen = batch.prompt_len, batch.output_len
    completion = np.array([r["completion_tokens"] for r in batch.rows], np.int64)
    prompt = np.array([r["prompt_tokens"] for r in batch.rows], np.int64)
    # the smallest id of each row (read for non-empty rows only, where it is meaningful)
    lowest = np.minimum.reduceat(np.append(batch.tokens, 0), batch.offsets[:-1])
    suspect = (olen == 0) | (plen == 0) | (completion != olen) | (prompt != plen) | (lowest < 0)
    suspect |= np.array([not r["id"] for r in batch.rows])
    bad = []
    for r in np.flatnonzero(suspect).tolist():
        row, p, o = batch.rows[r], int(plen[r]), int(olen[r])
        if not row["id"]:
            bad.append((r, "empty id"))
        elif o == 0:
            bad.append((r, "empty output"))
        elif p == 0:
            bad.append((r, "empty prompt"))
        elif row["completion_tokens"] != o:
            bad.append((r, f"completion_tokens {row['completion_tokens']} != {o} output ids"))
        elif row["prompt_tokens"] != p:
            bad.append((r, f"prompt_tokens {row['prompt_tokens']} != {p} prompt ids"))
        else:
            bad.append((r, "negative token id"))
    return bad


class _Rebalance(ConsumerRebalanceListener):
    """On assignment seek to the manifest's offsets; on revocation write what is buffered.

    Both run on kafka-python's IO thread while the main thread waits in ``poll()``, and do
    only file IO and a local ``seek``, never a blocking consumer call. A *lost* partition
    (our membership expired) may already be owned by another sink: its buffer is dropped.
    """

    def __init__(self, sink: _Sink, consumer: KafkaConsumer) -> None:
        self.sink = sink
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self.sink.close_partition(tp, write=True)

    def on_partitions_lost(self, lost: Any) -> None:
        for tp in lost:
            self.sink.close_partition(tp, write=False)

    def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            offset = self.sink.open_partition(tp)
            if offset is not None:
                self.consumer.seek(tp, offset)


class _CrashHook:
    """Test-only: SIGKILL this process at a named step of the commit sequence.

    ``EAGLEFEED_SINK_CRASH_AT=STEP[:N]`` kills at the N-th time (default 1st) the sink reaches
    STEP: ``after_dead_letter``, ``after_rename``, ``after_manifest`` or ``after_commit``.
    """

    STEPS = ("after_dead_letter", "after_rename", "after_manifest", "after_commit")

    def __init__(self, spec: str | None) -> None:
        self.step, _, count = (spec or "").partition(":")
        if self.step and self.step not in self.STEPS:
            raise ValueError(f"unknown crash step {self.step!r}; one of {self.STEPS}")
        self.left = int(count or 1)

    def __call__(self, step: str) -> None:
        if step == self.step:
            self.left -= 1
            if self.left <= 0:
                log.warning("test crash hook: SIGKILL at %s", step)
                os.kill(os.getpid(), signal.SIGKILL)
