"""Steps 1-2 of the sink's commit order: decode a segment's messages, dead-letter, drop ids already written.

See ``eaglefeed.consumers.sink.checkpoint`` for the whole order. :class:`SegmentBuilder` does the
steps; :class:`SinkIds` owns the id index step 2 claims through, and its whole life cycle.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kafka.structs import TopicPartition

from eaglefeed.consumers.sink.writer import WriteJob
from eaglefeed.core.clients import Producer, Record, SendFuture
from eaglefeed.core.errors import DatasetError, SchemaError, UnknownSchemaError
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import hidden_states, shards
from eaglefeed.dataset.hidden_states import HiddenStatesRef
from eaglefeed.dataset.ids import IdIndex
from eaglefeed.dataset.markers import flag_markers_for
from eaglefeed.schemas import GENERATION
from eaglefeed.schemas.columnar import GenerationBatch, decode_generations
from eaglefeed.schemas.deadletter import dead_letter_for
from eaglefeed.schemas.validity import invalid_rows

log = logging.getLogger(__name__)


class SegmentBuilder:
    """Decode messages in bulk, dead-letter what cannot be a row, drop ids already written.

    Args:
        ids: the dataset's ids; step 2 claims through it (and it decides when it is read).
        producer: sends the dead letters.
        dead_letter_topic: where they go.
        metrics: the dead-letter counter.
        crash: test hook, called with ``after_dead_letter``.
    """

    def __init__(self, *, ids: SinkIds, producer: Producer, dead_letter_topic: str, metrics: SinkMetrics,
                 crash: Callable[[str], None]) -> None:
        self._ids = ids
        self._producer = producer
        self._topic = dead_letter_topic
        self._metrics = metrics
        self._crash = crash

    def build(self, tp: TopicPartition, messages: list[Record]) -> WriteJob:
        """Steps 1-2 for ``messages`` (consecutive messages of ``tp``); returns steps 3-4 to do.

        Raises:
            KafkaError: a dead letter was not acknowledged (nothing of the segment is recorded).
        """
        started = time.perf_counter()
        first, last = messages[0].offset, messages[-1].offset
        rows, kinds = self._decode(messages)
        # Everything that can fail comes before the ids are claimed: a claimed id counts as written.
        markers = {t: flag_markers_for(t) for t in {r["tokenizer_id"] for r in rows.rows}}
        fresh = self._ids.claim([r["id"] for r in rows.rows])
        keep = [i for i, new in enumerate(fresh) if new]
        duplicates = len(rows) - len(keep)
        rows = rows.select(keep)
        # Even a segment without rows is recorded, so the manifest's offsets move past it.
        event: dict[str, Any] = {"kind": "flush", "offsets": {f"{tp.topic}:{tp.partition}": [first, last]},
                                 "duplicates": duplicates, "dead_lettered": sum(kinds.values())}
        if kinds:
            event["dead_letter_kinds"] = dict(kinds)
        job = WriteJob(key=tp, event=event, next_offset=last + 1, started=started)
        if len(rows):
            job.rows, job.name = rows, shards.segment_name(tp.topic, tp.partition, first, last)
            job.markers = markers
        return job

    def _decode(self, messages: list[Record]) -> tuple[GenerationBatch, Counter[str]]:
        """Decode and validate; dead-letter the failures (acknowledged before we go on)."""
        decoded = decode_generations([m.value or b"" for m in messages])
        invalid = [(r, "invalid_generation", reason) for r, reason in invalid_rows(decoded.batch)]
        invalid += self._states_problems(decoded.batch, skip={r for r, _, _ in invalid})
        failures = [(i, _kind(exc), str(exc)) for i, exc in decoded.errors]
        failures += [(decoded.index[r], kind, reason) for r, kind, reason in invalid]
        if not failures:
            return decoded.batch, Counter()
        kinds = self._dead_letter([(messages[i], kind, message) for i, kind, message in sorted(failures)])
        bad_rows = {r for r, _kind, _reason in invalid}
        keep = [r for r in range(len(decoded.batch)) if r not in bad_rows]
        return decoded.batch.select(keep), kinds

    def _states_problems(self, batch: GenerationBatch, *, skip: set[int]) -> list[tuple[int, str, str]]:
        """Rows whose hidden-state file does not match its reference (``hidden_states_corrupt``).

        Only rows the dataset does not hold yet are checked (a duplicate's file may be collected
        already). A file that is missing stops the sink instead: the workers' store is not this
        dataset's (``--hidden-states-dir``), or files were deleted, and neither is the row's fault.

        Raises:
            DatasetError: a row's file is missing (nothing of the segment is recorded).
        """
        rows = [(r, row["hidden_states"]) for r, row in enumerate(batch.rows)
                if row.get("hidden_states") and r not in skip]
        if not rows:
            return []
        held = self._ids.known([batch.rows[r]["id"] for r, _ in rows])
        bad = []
        for (r, record), known in zip(rows, held, strict=True):
            if known:
                continue
            ref = HiddenStatesRef.from_record(record)
            trouble = hidden_states.problem(self._ids.root, ref)
            if trouble is not None and trouble.endswith("is missing"):
                where = hidden_states.store_location(self._ids.root)
                raise DatasetError(f"the hidden states of {batch.rows[r]['id']} are not in this dataset: "
                                   f"{trouble} from {where}; the workers' --hidden-states-dir "
                                   f"must be {where}")
            if trouble is not None:
                bad.append((r, "hidden_states_corrupt", trouble))
        return bad

    def _dead_letter(self, failures: list[tuple[Record, str, str]]) -> Counter[str]:
        """Step 1: send a dead letter for each ``(record, kind, message)``; wait for every ack."""
        kinds: Counter[str] = Counter()
        sent: list[SendFuture] = []
        for rec, kind, message in failures:
            value = dead_letter_for(rec, stage="sink", kind=kind, message=message, codec=GENERATION)
            sent.append(self._producer.send(self._topic, key=rec.key, value=value))
            kinds[kind] += 1
            self._metrics.dead_letters.labels(kind).inc()
        self._producer.flush()
        for future in sent:  # flush() does not raise: a lost dead letter must stop the flush
            future.get(timeout=0)
        self._crash("after_dead_letter")
        return kinds


def _kind(exc: SchemaError) -> str:
    """The dead-letter kind of a message that did not decode.

    ``unknown_schema``: well formed but written by a schema version this sink does not ship
    (a writer upgraded before its readers); the letter keeps the original bytes, so an
    upgraded sink can take it again. Anything else is ``undecodable_generation``.
    """
    return "unknown_schema" if isinstance(exc, UnknownSchemaError) else "undecodable_generation"


class SinkIds:
    """The ids the dataset holds, kept up to date for one sink process (step 2), in one owner.

    :class:`SinkIds` alone holds the ``eaglefeed.dataset.ids.IdIndex`` and decides when it is read
    or forgotten; the rest of the sink only reports events to it:
        * partitions assigned (``SinkCheckpoint.assigned``, in the rebalance callback): stale, since
          another sink may have written ids since we last looked; only marked, so the callback's
          cost does not grow with the dataset;
        * a segment fenced (the writer's count, reported on assignment and after each commit): every
          id forgotten and read again, since the fenced segment's ids were claimed but never written;
        * a segment built (``SegmentBuilder.build``): read first if stale (sync before use), then
          its ids claimed;
        * a commit ran (``SinkCheckpoint.commit``, on the main thread): read now if stale, so a
          segment built in a rebalance callback (a revoke) never waits for the whole dataset.

    Why a class of its own rather than the builder or the checkpoint: the events come from two
    places (only the checkpoint sees assignments, fenced segments and the main thread's commits;
    only the builder claims), so whichever of the two held the index would take orders from the
    other about its state. Both hold a :class:`SinkIds` instead; neither knows whether it is stale.

    Args:
        root: the dataset directory (its ids, compacted shards and dropped ids included).
        metrics: the index-size gauge.
    """

    def __init__(self, *, root: Path, metrics: SinkMetrics) -> None:
        self._root = Path(root)
        self._metrics = metrics
        self._index = IdIndex()
        self._stale = True  # nothing read yet
        self._fenced_seen = 0  # the writer's count of fenced segments, as of the last report

    @property
    def root(self) -> Path:
        """The dataset directory."""
        return self._root

    def known(self, ids: Sequence[str]) -> list[bool]:
        """Whether the dataset holds each of ``ids`` already (read first if stale); claims nothing."""
        self.sync()
        return [record_id in self._index for record_id in ids]

    def claim(self, ids: Sequence[str]) -> list[bool]:
        """Step 2: record ``ids`` as written, reading the index first if it is stale.

        Returns:
            True for each id the dataset does not hold yet (a repeat within ``ids`` is False).
        """
        self.sync()
        return self._index.claim(ids)

    def assigned(self, *, fenced: int) -> None:
        """Partitions were assigned: read the ids again before the next claim (marks only, cheap).

        Args:
            fenced: the writer's count of fenced segments since the start.
        """
        self._forget_fenced(fenced)
        self._stale = True

    def must_forget(self, *, fenced: int) -> bool:
        """Whether the next report of ``fenced`` forgets every id (a segment was fenced since the last).

        The caller first waits for the segments still being written: their ids are claimed but not
        yet in the dataset, so forgetting them before they land would let a redelivery through.
        """
        return fenced != self._fenced_seen

    def committed(self, *, fenced: int) -> None:
        """A commit ran on the main thread: forget fenced claims, read what is stale now.

        Args:
            fenced: the writer's count of fenced segments since the start.
        """
        self._forget_fenced(fenced)
        self.sync()

    def sync(self) -> None:
        """Read the ids written since the last sync, if an assignment or a fence made the index stale."""
        if not self._stale:
            return
        started = time.perf_counter()
        read = self._index.sync(self._root)
        self._stale = False
        self._metrics.index_ids.set(len(self._index))
        log.info("id index: %d ids (%d read in %.2fs)", len(self._index), read, time.perf_counter() - started)

    def _forget_fenced(self, fenced: int) -> None:
        """After a fenced segment, forget every id: its ids were claimed but never reached the dataset."""
        if fenced != self._fenced_seen:
            self._fenced_seen = fenced
            self._index = IdIndex()
            self._stale = True
