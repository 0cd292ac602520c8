"""Steps 1-2 of the sink's commit order: decode a partition's messages into one segment's rows.

See ``eaglefeed.consumers.sink.checkpoint`` for the whole order.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kafka.structs import TopicPartition

from eaglefeed.consumers.sink.ids import SinkIds
from eaglefeed.consumers.sink.writer import WriteJob
from eaglefeed.core.clients import Producer, Record, SendFuture
from eaglefeed.core.errors import SchemaError, UnknownSchemaError
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import shards
from eaglefeed.dataset.markers import flag_markers_for
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
        invalid = invalid_rows(decoded.batch)
        failures = [(i, _kind(exc), str(exc)) for i, exc in decoded.errors]
        failures += [(decoded.index[r], "invalid_generation", reason) for r, reason in invalid]
        if not failures:
            return decoded.batch, Counter()
        kinds = self._dead_letter([(messages[i], kind, message) for i, kind, message in sorted(failures)])
        bad_rows = {r for r, _reason in invalid}
        keep = [r for r in range(len(decoded.batch)) if r not in bad_rows]
        return decoded.batch.select(keep), kinds

    def _dead_letter(self, failures: list[tuple[Record, str, str]]) -> Counter[str]:
        """Step 1: send a dead letter for each ``(record, kind, message)``; wait for every ack."""
        kinds: Counter[str] = Counter()
        sent: list[SendFuture] = []
        for rec, kind, message in failures:
            value = dead_letter_for(rec, stage="sink", kind=kind, message=message)
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
