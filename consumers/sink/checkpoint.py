"""The sink's checkpoint: segments become durable here, and only here are offsets committed or sought.

Commit order for each segment (the manifest, not Kafka, is the source of truth):
    1. decode the buffered messages in bulk; send the undecodable and invalid ones to the
       dead-letter topic and wait for the broker's acknowledgement;
    2. drop the rows whose ``id`` the dataset already holds (``SinkIds``);
    3. write the rows to a temp file, fsync it, rename it into ``segments/``;
    4. append the segment (with its per-partition offset range) to ``manifest.jsonl``, fsync;
    5. commit the Kafka offset one past the segment's last record (advisory).
Steps 1-2 run on the main thread (``eaglefeed.consumers.sink.segments``); steps 3-4 on a writer thread
(``eaglefeed.consumers.sink.writer``) in submission order, while the main thread polls and decodes the
next segment; step 5 back on the main thread (:meth:`SinkCheckpoint.commit`). A crash before 4
leaves at most a file that the next owner of the partition deletes (and dead letters that are
sent again); a crash between 4 and 5 is harmless because on assignment the sink seeks to the
manifest's offsets. The id index covers the whole dataset, compacted shards included, and is
brought up to date whenever partitions are assigned (its one owner and its life cycle:
``SinkIds`` in ``eaglefeed.consumers.sink.segments``).

Fencing: on assignment the sink appends a *claim* of its new partitions to the manifest (a token
of this assignment) and reads the resume offsets up to it. Steps 3-4 of a segment happen only
under the manifest's write lock and only while the partition's latest claim is still the one
the segment was built under; step 5 only while the partition is still assigned under it. So a
sink that lost a partition without an orderly revoke (its session expired: paused, stalled)
never writes behind the partition's next owner: its queued segments are dropped, and their
rows are read again by whoever owns the partition.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.consumers.sink.writer import SegmentWriter, WriteJob
from eaglefeed.core.clients import Consumer, Record, partition_name, partition_names
from eaglefeed.core.errors import EaglefeedError
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.core.stage import Upstream, commit_positions
from eaglefeed.dataset import manifest, shards

log = logging.getLogger(__name__)

FIRST_OFFSETS_MS = 10_000
"""How long the sink waits for the first offsets of the partitions it reads from their beginning."""


@dataclass
class SinkSummary:
    """Counts of one sink run."""

    rows_written: int = 0
    duplicates_dropped: int = 0
    dead_lettered: int = 0
    segments: int = 0
    lag_at_exit: int | None = None  # records left in the topic when --exit-when-idle ended the run
    # the generate group when --exit-when-idle ended the run with prompts left and no worker
    upstream_stalled: Upstream | None = None


class SinkCheckpoint:
    """Turn batches of messages into committed segments; own the partitions' positions.

    Args:
        root: the dataset directory.
        consumer: commits and seeks go through it; None commits nothing to Kafka (benchmarks).
        buffers: the partitions' buffers, opened and closed with the assignment.
        segments: steps 1-2 of each segment.
        ids: the id index the segments claim through; told of assignments, fenced segments, commits.
        metrics: the counters of written segments.
        crash: test hook, called with ``after_commit`` (and by the writer with its steps).
    """

    def __init__(self, *, root: Path, consumer: Consumer | None, buffers: Buffers, segments: SegmentBuilder,
                 ids: SinkIds, metrics: SinkMetrics, crash: Callable[[str], None]) -> None:
        self._root = Path(root)
        self._consumer = consumer
        self._buffers = buffers
        self._segments = segments
        self._ids = ids
        self._metrics = metrics
        self._crash = crash
        self._tail = manifest.ManifestTail(self._root)
        self._tail.refresh()  # the whole manifest once, here; the rebalance listener reads only what is new
        self._writer = SegmentWriter(self._root, crash=crash, tail=self._tail)
        self._owner = uuid.uuid4().hex[:12]  # this process
        self._assignments = 0
        self._claims: dict[TopicPartition, str] = {}  # assigned partition → the claim it was assigned under
        self._resumed: dict[TopicPartition, tuple[str, int]] = {}  # to commit: (claim, manifest's offset)
        self._from_start: dict[TopicPartition, str] = {}  # sought to the beginning → its claim
        self._drained: dict[TopicPartition, int] = {}  # positions committed by commit_drained()
        self.summary = SinkSummary()
        self.writing = 0  # records handed to the writer thread, not yet counted in the summary

    # --- partitions (called by the rebalance listener) ---------------------------------
    def assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Claim ``tps`` in the manifest, drop their files never committed, seek to the resume offsets.

        A partition the manifest knows nothing of (a new or deleted ``--output``, a new partition)
        is read from its beginning, not from the group's committed offset: the dataset folder is
        the truth, so ``rm -rf DIR`` and the same sink command rebuild it.

        Costs what changed in the manifest since the last assignment, plus one listing of
        ``segments/``: it runs on kafka-python's IO thread while the group waits.
        """
        tps = sorted(tps)
        if not tps:
            return
        self._writer.wait()  # a write of ours still in flight would move the offsets
        self._assignments += 1
        generation = self._generation()
        token = f"{self._owner}:{generation}:{self._assignments}"
        self._tail.claim([_key(tp) for tp in tps], token, generation=generation)
        log.info("assigned %s (claim %s)", [partition_name(tp) for tp in tps], token)
        prefixes = [shards.segment_prefix(tp.topic, tp.partition) for tp in tps]
        for rel in shards.discard_uncommitted(self._root, self._tail.added, prefixes):
            log.info("removed uncommitted segment %s", rel)
        self._ids.assigned(fenced=self._writer.fenced)  # another sink may have written ids meanwhile
        for tp in tps:
            self._buffers.open(tp)
            self._claims[tp] = token
            if self._consumer is None:
                continue
            offset = self._tail.resume_offset(_key(tp))
            if offset is None:  # the dataset holds nothing of it: all of it, whatever the group committed
                self._consumer.seek_to_beginning(tp)
                self._from_start[tp] = token  # its first offset is asked off this thread (a warning)
            else:
                self._consumer.seek(tp, offset)
                self._resumed[tp] = (token, offset)  # committed by the next commit(), off this thread
        unknown = [tp for tp in tps if self._from_start.get(tp) == token]
        if unknown:
            log.info("the manifest has no offsets of %s: reading them from the beginning",
                     partition_names(unknown))

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        """Write what ``tps`` have buffered and wait: the next owner reads the manifest at once.

        After a failed write (a full disk) nothing more is written: the next owner reads it again.
        """
        for tp in tps:
            messages = self._buffers.close(tp)
            if messages and not self._writer.failed:
                self.write(tp, messages)
                self._writer.wait()
            self._claims.pop(tp, None)
            self._drained.pop(tp, None)

    def lost(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the buffers of ``tps``: another sink may already own them (its claim fences our writes)."""
        for tp in tps:
            self._buffers.close(tp)
            self._claims.pop(tp, None)
            self._drained.pop(tp, None)

    # --- segments ---------------------------------------------------------------------
    def write(self, tp: TopicPartition, messages: list[Record]) -> None:
        """Steps 1-2 for ``messages`` of ``tp`` now; steps 3-4 queued on the writer thread.

        Blocks while the writer has a segment waiting (backpressure when the disk is slow).
        A partition not (or no longer) ours is not written.
        """
        claim = self._claims.get(tp)
        if claim is None:
            log.info("not writing %d records of %s: the partition is not ours", len(messages),
                     partition_name(tp))
            return
        job = self._segments.build(tp, messages)
        job.fence = {_key(tp): claim}
        job.records = len(messages)
        self.writing += job.records
        self._writer.submit(job)

    def commit(self) -> dict[TopicPartition, int]:
        """Step 5: count the segments written since the last call and commit their offsets to Kafka.

        The commit is advisory (the manifest already holds the offsets). Only partitions still
        assigned under the claim a segment was written under are committed; a partition just
        assigned is committed at the manifest's resume offset (the previous owner's last segment
        may not have been).

        Returns:
            partition → the offset committed (one past its last written record).

        Raises:
            RuntimeError: writing a segment failed (nothing after it was written).
        """
        resumed, self._resumed = self._resumed, {}
        offsets = {tp: offset for tp, (claim, offset) in resumed.items() if self._claims.get(tp) == claim}
        self._warn_of_trimmed_starts()
        for job in self._writer.finished():
            self.writing -= job.records
            if job.fenced:
                first, last = job.event["offsets"][_key(job.key)]
                log.warning("dropped a segment of %s (offsets %d-%d): the partition has a newer owner",
                            partition_name(job.key), first, last)
                self._metrics.segments_fenced.inc()
                continue
            self._count(job)
            if self._claims.get(job.key) == job.fence.get(_key(job.key)):  # still ours, as it was then
                offsets[job.key] = job.next_offset
        if self._ids.must_forget(fenced=self._writer.fenced):
            self._writer.wait()  # segments in flight hold claimed ids the re-read would not see yet
        self._ids.committed(fenced=self._writer.fenced)  # on this (main) thread, not in a rebalance callback
        if not offsets or self._consumer is None:
            return offsets
        try:
            self._consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - offsets are advisory; the manifest decides
            log.warning("offset commit failed (%r); the manifest still holds the offsets", exc)
        self._crash("after_commit")
        return offsets

    def commit_drained(self) -> dict[TopicPartition, int]:
        """When nothing is buffered or being written: commit each partition's position past its last record.

        What lies between a partition's last written record and its position is transaction
        markers only (an ``--exactly-once`` worker's commit follows its last record). Committed
        there, the group's lag is 0, so another member's ``--exit-when-idle`` and ``status`` see
        the partition done. The manifest still decides where a new owner resumes.

        Returns:
            partition → the offset committed.
        """
        if self._consumer is None or self._writer.busy or self._buffers.total():
            return {}
        return commit_positions(self._consumer, self._claims, self._drained)

    def drain(self) -> dict[TopicPartition, int]:
        """Wait until every segment written is in the manifest, then :meth:`commit`."""
        self._writer.wait()
        return self.commit()

    def close(self) -> None:
        """Write what is queued, then stop the writer thread."""
        self._writer.close()

    def _warn_of_trimmed_starts(self) -> None:
        """Warn in one line of the partitions read from their beginning whose first records are deleted.

        Those rebuild only what the topic still holds. Asked here, on the main thread: the
        rebalance callback that sought them makes no blocking consumer call.
        """
        from_start, self._from_start = self._from_start, {}
        tps = [tp for tp, claim in sorted(from_start.items()) if self._claims.get(tp) == claim]
        if not tps or self._consumer is None:
            return
        try:
            first = self._consumer.beginning_offsets(tps, timeout_ms=FIRST_OFFSETS_MS)
        except Exception as exc:  # noqa: BLE001 - only a warning depends on it
            log.warning("cannot ask the first offsets of %s (%r)", partition_names(tps), exc)
            return
        trimmed = {tp: offset for tp, offset in sorted(first.items()) if offset > 0}
        if trimmed:
            log.warning("the dataset is rebuilt only in part: the topic no longer holds the first records "
                        "of %s (retention deleted them); first available offsets: %s",
                        partition_names(trimmed),
                        ", ".join(f"{partition_name(tp)} at {offset}" for tp, offset in trimmed.items()))

    def _generation(self) -> int:
        """The group generation of the current assignment (-1 when the consumer cannot say)."""
        try:
            return int(self._consumer.group_metadata().generation_id)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - only a label: the claim token is unique without it
            return -1

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


def _key(tp: TopicPartition) -> str:
    """The manifest's name of a partition: ``topic:partition``."""
    return f"{tp.topic}:{tp.partition}"


class SinkRebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Hand the consumer's rebalance callbacks to the :class:`SinkCheckpoint`.

    They run on kafka-python's IO thread while the main thread waits in ``poll()`` (or
    ``close()``), and do only file IO and a local ``seek``, never a blocking consumer call.
    A *lost* partition (our membership expired) may already be owned by another sink: its
    buffer is dropped, and its segments still queued are fenced off by the new owner's claim.
    """

    def __init__(self, checkpoint: SinkCheckpoint) -> None:
        self._checkpoint = checkpoint
        self.failure: EaglefeedError | None = None
        """The first of our errors a callback met (the store or disk refused a claim or a write).

        Kept rather than raised: kafka-python would log its traceback and raise a KafkaError of
        its own in its place. The main loop raises it after ``poll()``, before it buffers a record.
        """

    def on_partitions_revoked(self, revoked: Any) -> None:
        """Write what the revoked partitions have buffered, then let them go."""
        self._guarded(self._checkpoint.revoked, revoked)

    def on_partitions_lost(self, lost: Any) -> None:
        """Drop the buffers of partitions another member may own already."""
        self._guarded(self._checkpoint.lost, lost)

    def on_partitions_assigned(self, assigned: Any) -> None:
        """Clean up after a crashed owner and seek to the manifest's offsets."""
        self._guarded(self._checkpoint.assigned, assigned)

    def raise_failure(self) -> None:
        """Raise what a callback met, if anything (see :attr:`failure`)."""
        if self.failure is not None:
            raise self.failure

    def _guarded(self, callback: Any, partitions: Any) -> None:
        try:
            callback(partitions)
        except EaglefeedError as exc:
            if self.failure is None:
                self.failure = exc


class CrashHook:
    """Kill this process at a named step of the commit sequence (see the module's commit order).

    ``EAGLEFEED_SINK_CRASH_AT=STEP[:N]`` kills at the N-th time (default 1st) the sink reaches
    STEP: ``after_dead_letter``, ``after_rename``, ``after_manifest`` or ``after_commit``.

    Args:
        spec: ``STEP[:N]``, or None for a hook that never fires.

    Raises:
        ValueError: STEP is not one of :attr:`STEPS`.
    """

    STEPS = ("after_dead_letter", "after_rename", "after_manifest", "after_commit")

    def __init__(self, spec: str | None) -> None:
        self.step, _, count = (spec or "").partition(":")
        if self.step and self.step not in self.STEPS:
            raise ValueError(f"unknown crash step {self.step!r}; one of {self.STEPS}")
        self.left = int(count or 1)

    def __call__(self, step: str) -> None:
        """Count ``step``; SIGKILL this process when it is the N-th time of the configured step."""
        if step == self.step:
            self.left -= 1
            if self.left <= 0:
                log.warning("test crash hook: SIGKILL at %s", step)
                os.kill(os.getpid(), signal.SIGKILL)
