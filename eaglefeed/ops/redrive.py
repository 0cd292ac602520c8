"""Dead letters for people: read the dead-letter topic, count it by reason, re-drive after a fix.

What can be re-driven, and where to:
    generate: the original PromptRecord, republished to the prompts topic with its original key;
        the worker generates its samples again. Several dead letters of one prompt (one per
        sample) republish it once. A sample that had succeeded is generated again, and the
        sink drops the row it already has (it dedups by record id): rows are never doubled,
        also when the same dead letters are re-driven twice.
    sink: the original GenerationRecord, republished to the generations topic with its key
        (the sink dedups by id).
    converse: the same (a generation whose conversation could not be continued); the converse
        stage continues it again, and the sink drops the row it already has.
    produce: not here. The dead letter holds the raw input line (capped), not a prompt: fix the
        line in the source and run ``produce`` again; prompt ids are deterministic, so what
        was produced before is not produced twice (with ``--skip-done``, nor generated).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import make_consumer, make_producer
from eaglefeed.schemas import DEAD_LETTER, PROMPT

READ_TIMEOUT = 60.0
"""Seconds to read the dead-letter topic to its end before giving up."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter and where it sits on the dead-letter topic."""

    position: str  # "<partition>@<offset>" on the dead-letter topic
    record: dict[str, Any]  # the decoded DeadLetterRecord

    @property
    def prompt_id(self) -> str | None:
        """The prompt this dead letter is about, when it is known."""
        rec = self.record
        if rec["stage"] == "generate" and rec["value"]:
            try:
                return str(PROMPT.decode(rec["value"])["prompt_id"])
            except SchemaError:
                return None
        record_id = rec["record_id"]
        return None if record_id is None else str(record_id).split(":")[0]

    def matches(self, *, kinds: Iterable[str] = (), ids: Iterable[str] = (),
                stage: str | None = None) -> bool:
        """Whether every given selector selects it (an empty one selects everything).

        Args:
            kinds: reasons (error kinds).
            ids: prompt ids, record ids (``prompt_id:sample``) or positions (``P@O``).
            stage: ``produce``, ``generate`` or ``sink``.
        """
        kinds, ids = list(kinds), list(ids)
        names = {self.position, self.prompt_id, self.record["record_id"]}
        return ((not kinds or self.record["error_kind"] in kinds) and (not ids or bool(names & set(ids)))
                and (stage is None or self.record["stage"] == stage))

    def as_json(self) -> dict[str, Any]:
        """The fields a reader needs (the original bytes are summarised, not dumped)."""
        rec = self.record
        key = rec["key"]
        return {"position": self.position, "stage": rec["stage"], "reason": rec["error_kind"],
                "message": rec["message"], "source": rec["source"], "line": rec["line"],
                "prompt_id": self.prompt_id, "record_id": rec["record_id"], "topic": rec["topic"],
                "partition": rec["partition"], "offset": rec["offset"], "attempts": rec["attempts"],
                "created_at": rec["created_at"],
                "key": None if key is None else key.decode("utf-8", "backslashreplace"),
                "value_bytes": len(rec["value"] or b"")}

    def describe(self) -> str:
        """One line: position, stage, reason, where it came from, and the message."""
        rec = self.record
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rec["created_at"] / 1000))
        if rec["stage"] == "produce":
            origin = f"{rec['source']}:{rec['line']}"
        else:
            origin = f"prompt {self.prompt_id or '?'}"
            if rec["record_id"] and rec["record_id"] != self.prompt_id:
                origin = f"record {rec['record_id']}"
            origin += f" ({rec['topic']} {rec['partition']}@{rec['offset']}, {rec['attempts']} attempts)"
        message = " ".join(str(rec["message"]).split())
        return f"{self.position} {when} {rec['stage']} {rec['error_kind']} {origin}: {message}"


def read_dead_letters(kafka: KafkaConfig) -> list[DeadLetter]:
    """Every dead letter on ``<prefix>.dead-letter``, oldest first (nothing is committed)."""
    topic = kafka.dead_letter_topic
    consumer = make_consumer(kafka, None, isolation_level="read_committed")
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            return []
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        letters: list[DeadLetter] = []
        deadline = time.monotonic() + READ_TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {READ_TIMEOUT:.0f} s")
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    letters.append(DeadLetter(position=f"{tp.partition}@{r.offset}",
                                              record=DEAD_LETTER.decode(r.value or b"")))
        return sorted(letters, key=lambda d: (d.record["created_at"], d.position))
    finally:
        consumer.close()


def summary(letters: Iterable[DeadLetter]) -> Counter[tuple[str, str]]:
    """How many dead letters there are by (stage, reason)."""
    return Counter((d.record["stage"], d.record["error_kind"]) for d in letters)


@dataclass
class Redrive:
    """What a re-drive republished and what it left alone (with why)."""

    republished: list[str]  # prompt ids (generate) or record ids (sink)
    skipped: list[tuple[DeadLetter, str]]


def redrive(kafka: KafkaConfig, letters: Iterable[DeadLetter], *,
            send: Callable[[str, bytes | None, bytes], None] | None = None) -> Redrive:
    """Republish the originals of ``letters`` where they came from (see the module docstring).

    Args:
        kafka: the pipeline's broker and topics.
        letters: the selected dead letters.
        send: publishes one record (a test seam; an idempotent producer when None).
    """
    result = Redrive(republished=[], skipped=[])
    plan: dict[str, tuple[str, bytes | None, bytes]] = {}  # one republish per prompt / record
    targets = {"generate": kafka.prompts_topic, "sink": kafka.generations_topic,
               "converse": kafka.generations_topic}
    for letter in letters:
        rec = letter.record
        target = targets.get(rec["stage"])
        if target is None:
            result.skipped.append((letter, f"fix {rec['source']} line {rec['line']} and run produce again"))
        elif rec["topic"] != target or not rec["value"]:
            result.skipped.append((letter, f"its original is not a record of {target}"))
        elif rec["stage"] == "generate" and letter.prompt_id is None:
            result.skipped.append((letter, "its original is not a readable PromptRecord"))
        else:
            plan.setdefault(letter.prompt_id if rec["stage"] == "generate" else  # type: ignore[arg-type]
                            f"{rec['topic']}:{rec['record_id'] or letter.position}",
                            (target, rec["key"], rec["value"]))
    if plan:
        _publish(kafka, list(plan.values()), send)
    result.republished = list(plan)
    return result


def _publish(kafka: KafkaConfig, records: list[tuple[str, bytes | None, bytes]],
             send: Callable[[str, bytes | None, bytes], None] | None) -> None:
    if send is not None:
        for topic, key, value in records:
            send(topic, key, value)
        return
    producer = make_producer(kafka)
    try:
        futures = [producer.send(topic, key=key, value=value) for topic, key, value in records]
        producer.flush()
        for future in futures:
            future.get(timeout=60)  # raises if the broker did not take it
    finally:
        producer.close()
