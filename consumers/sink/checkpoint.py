"""The sink's checkpoint: segments become durable here, and only here are offsets committed or sought.

Commit order for each segment (the manifest, not Kafka, is the source of truth):
    1. decode the buffered messages in bulk; send the undecodable and invalid ones to the
       dead-letter topic and wait for the broker's acknowledgement;
    2. drop the rows whose ``id`` the dataset already holds (``dataset.ids``);
    3. write the rows to a temp file, fsync it, rename it into ``segments/``;
    4. append the segment (with its per-partition offset range) to ``manifest.jsonl``, fsync;
    5. commit the Kafka offset one past the segment's last record (advisory).
Steps 1-2 run on the main thread (``consumers.sink.segments``); steps 3-4 on a writer thread
(``consumers.sink.writer``) in submission order, while the main thread polls and decodes the
next segment; step 5 back on the main thread (:meth:`Checkpoint.commit`). A crash before 4
leaves at most a file that the next owner of the partition deletes (and dead letters that are
sent again); a crash between 4 and 5 is harmless because on assignment the sink seeks to the
manifest's offsets. The id index covers the whole dataset, compacted shards included, and is
brought up to date whenever partitions are assigned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata, TopicPartition

from consumers.sink.buffers import Buffers
from consumers.sink.segments import SegmentBuilder
from consumers.sink.writer import SegmentWriter, WriteJob
from dataset import manifest, shards
from eaglefeed.kafka import Consumer, Record
from eaglefeed.metrics import SinkMetrics

log = logging.getLogger(__name__)


@dataclass
class SinkSummary:
    """Counts of one sink run."""

    rows_written: int = 0
    duplicates_dropped: int = 0
    dead_lettered: int = 0
    segments: int = 0
    lag_at_exit: int | None = None  # records left in the topic when --exit-when-idle ended the run


class Checkpoint:
    """Turn batches of messages into committed segments; own the partitions' positions.

    Args:
        root: the dataset directory.
        consumer: commits and seeks go through it; None commits nothing to Kafka (benchmarks).
        buffers: the partitions' buffers, opened and closed with the assignment.
        segments: steps 1-2 of each segment.
        metrics: the counters of written segments.
        crash: test hook, called with ``after_commit`` (and by the writer with its steps).
    """

    def __init__(self, *, root: Path, consumer: Consumer | None, buffers: Buffers, segments: SegmentBuilder,
                 metrics: SinkMetrics, crash: Callable[[str], None]) -> None:
        self._root = Path(root)
        self._consumer = consumer
        self._buffers = buffers
        self._segments = segments
        self._metrics = metrics
        self._crash = crash
        self._writer = SegmentWriter(self._root, crash=crash)
        self.summary = SinkSummary()

    # --- partitions (called by the rebalance listener) ---------------------------------
    def assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the files of ``tps`` never committed and seek to the manifest's resume offsets."""
        for tp in tps:
            self._writer.wait()  # a write of ours for tp still in flight would move its offsets
            events = manifest.read_manifest(self._root)
            prefix = shards.segment_prefix(tp.topic, tp.partition)
            for rel in shards.discard_uncommitted(self._root, manifest.ever_added(events), prefix):
                log.info("removed uncommitted segment %s", rel)
            self._buffers.open(tp)
            self._segments.invalidate_index()  # another sink may have written ids since we last looked
            offset = manifest.resume_offsets(events).get(f"{tp.topic}:{tp.partition}")
            if offset is not None and self._consumer is not None:
                self._consumer.seek(tp, offset)

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        """Write what ``tps`` have buffered and wait: the next owner reads the manifest at once."""
        for tp in tps:
            messages = self._buffers.close(tp)
            if messages:
                self.write(tp, messages)
                self._writer.wait()

    def lost(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the buffers of ``tps``: another sink may already own them."""
        for tp in tps:
            self._buffers.close(tp)

    # --- segments ---------------------------------------------------------------------
    def write(self, tp: TopicPartition, messages: list[Record]) -> None:
        """Steps 1-2 for ``messages`` of ``tp`` now; steps 3-4 queued on the writer thread.

        Blocks while the writer has a segment waiting (backpressure when the disk is slow).
        """
        self._writer.submit(self._segments.build(tp, messages))

    def commit(self) -> dict[TopicPartition, int]:
        """Step 5: count the segments written since the last call and commit their offsets to Kafka.

        The commit is advisory (the manifest already holds the offsets).

        Returns:
            partition → the offset committed (one past its last written record).

        Raises:
            RuntimeError: writing a segment failed (nothing after it was written).
        """
        offsets: dict[TopicPartition, int] = {}
        for job in self._writer.finished():
            offsets[job.key] = job.next_offset
            self._count(job)
        if not offsets or self._consumer is None:
            return offsets
        try:
            self._consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - offsets are advisory; the manifest decides
            log.warning("offset commit failed (%r); the manifest still holds the offsets", exc)
        self._crash("after_commit")
        return offsets

    def drain(self) -> dict[TopicPartition, int]:
        """Wait until every segment written is in the manifest, then :meth:`commit`."""
        self._writer.wait()
        return self.commit()

    def close(self) -> None:
        """Write what is queued, then stop the writer thread."""
        self._writer.close()

    def _count(self, job: WriteJob) -> None:
        event = job.event
        rows = sum(seg["rows"] for seg in event["added"])
        self.summary.rows_written += rows
        self.summary.duplicates_dropped += event["duplicates"]
        self.summary.dead_lettered += event["dead_lettered"]
        self._metrics.rows_written.inc(rows)
        self._metrics.duplicates_dropped.inc(event["duplicates"])
        for seg in event["added"]:
            self.summary.segments += 1
            self._metrics.segments_written.inc()
            self._metrics.bytes_written.inc(seg["bytes"])
        self._metrics.flush_seconds.observe(time.perf_counter() - job.started)


class SinkRebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Hand the consumer's rebalance callbacks to the :class:`Checkpoint`.

    They run on kafka-python's IO thread while the main thread waits in ``poll()`` (or
    ``close()``), and do only file IO and a local ``seek``, never a blocking consumer call.
    A *lost* partition (our membership expired) may already be owned by another sink: its
    buffer is dropped, nothing is written.
    """

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint

    def on_partitions_revoked(self, revoked: Any) -> None:
        """Write what the revoked partitions have buffered, then let them go."""
        self._checkpoint.revoked(revoked)

    def on_partitions_lost(self, lost: Any) -> None:
        """Drop the buffers of partitions another member may own already."""
        self._checkpoint.lost(lost)

    def on_partitions_assigned(self, assigned: Any) -> None:
        """Clean up after a crashed owner and seek to the manifest's offsets."""
        self._checkpoint.assigned(assigned)
