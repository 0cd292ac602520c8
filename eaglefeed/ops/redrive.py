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
        was produced before is not produced twice (with ``--skip-done``, nor generated). That
        run marks the line fixed (a fix marker, below), and its letters read as resolved.

What was re-driven is recorded: once the originals are acknowledged, one marker per dead letter
goes to the compacted topic ``<prefix>.redriven``, keyed by the letter's position
(``<partition>@<offset>``). A later re-drive skips marked letters (``again=True`` re-drives them
anyway), and the listing and summary show them as resolved. A re-driven prompt that fails again
gets a new dead letter, at a new position: open, and re-drivable. The marker follows the
republish, so a re-drive cut short between the two re-drives those letters again next time
(costing a generation, never a row) rather than marking letters whose originals were not sent.
A produce letter is resolved by its line's fix marker on the same topic, when the marker is newer
than the letter (:mod:`eaglefeed.schemas.redriven`); a line that fails again gets a newer letter,
open.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition

from eaglefeed.core.clients import Clients, Reader
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import ensure_topics, make_consumer, make_producer
from eaglefeed.ops.read_to_end import reached, records_to
from eaglefeed.schemas import DEAD_LETTER, PROMPT
from eaglefeed.schemas.redriven import MARKER_TOPIC_CONFIG, fix_key, fixes, redrive_marker

READ_TIMEOUT = 60.0
"""Seconds to read the dead-letter topic to its end before giving up."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter and where it sits on the dead-letter topic."""

    position: str  # "<partition>@<offset>" on the dead-letter topic
    record: dict[str, Any]  # the decoded DeadLetterRecord
    redriven: dict[str, Any] | None = None  # its re-drive marker (``redriven_at`` ms, ``to``), if re-driven
    fixed: dict[str, Any] | None = None  # produce: its line's newer fix marker (``fixed_at``, ``prompt_id``)

    @property
    def resolved(self) -> bool:
        """Whether it was re-driven, or (produce) its line was fixed and published since."""
        return self.redriven is not None or self.fixed is not None

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
                "value_bytes": len(rec["value"] or b""),
                "redriven_at": None if self.redriven is None else self.redriven["redriven_at"],
                "fixed_at": None if self.fixed is None else self.fixed["fixed_at"],
                "fixed_prompt_id": None if self.fixed is None else self.fixed.get("prompt_id")}

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
            if rec["source"] is not None:  # the input line it came from (a row with its own id: the file)
                origin += f" from {rec['source']}" + ("" if rec["line"] is None else f":{rec['line']}")
        message = " ".join(str(rec["message"]).split())
        done = "" if self.redriven is None else f" [re-driven {_when(self.redriven['redriven_at'])}]"
        if self.fixed is not None:
            done += (f" [fixed: published as prompt {self.fixed.get('prompt_id') or '?'} "
                     f"at {_when(self.fixed['fixed_at'])}]")
        return f"{self.position} {when} {rec['stage']} {rec['error_kind']} {origin}: {message}{done}"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def read_dead_letters(kafka: KafkaConfig, *, clients: Clients | None = None) -> list[DeadLetter]:
    """Every dead letter on ``<prefix>.dead-letter``, oldest first, with its re-drive or fix marker.

    Nothing is committed (no consumer group).

    Args:
        kafka: the pipeline's broker and topics.
        clients: where the readers come from (a test seam; our consumer when None).
    """
    markers: dict[str, dict[str, Any]] = {}
    for _position, key, value in _read_topic(kafka, kafka.redriven_topic, clients):
        if key is not None and value is not None:  # (a null value would be a tombstone: forgotten)
            markers[key.decode("utf-8", "replace")] = json.loads(value)
    letters = [_letter(position, DEAD_LETTER.decode(value or b""), markers)
               for position, _key, value in _read_topic(kafka, kafka.dead_letter_topic, clients)]
    return sorted(letters, key=lambda d: (d.record["created_at"], d.position))


def _letter(position: str, record: dict[str, Any], markers: dict[str, dict[str, Any]]) -> DeadLetter:
    """The letter with its markers: its own re-drive marker, or (produce) its line's fix if newer."""
    fixed = None
    if record["stage"] == "produce" and record["source"] is not None and record["line"] is not None:
        marker = markers.get(fix_key(record["source"], record["line"]))
        fixed = marker if fixes(marker, created_at=record["created_at"]) else None
    return DeadLetter(position=position, record=record, redriven=markers.get(position), fixed=fixed)


def _read_topic(kafka: KafkaConfig, topic: str,
                clients: Clients | None) -> Iterator[tuple[str, bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (none if it does not exist) as (``P@O``, key, value)."""
    consumer: Reader = (make_consumer(kafka, None, isolation_level="read_committed") if clients is None
                        else clients.reader(isolation_level="read_committed"))
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            return
        consumer.assign(partitions)
        for tp, first in consumer.beginning_offsets(partitions).items():
            consumer.seek(tp, first)
        ends = consumer.end_offsets(partitions)
        for tp, r in records_to(consumer, ends, seconds=READ_TIMEOUT):
            yield f"{tp.partition}@{r.offset}", r.key, r.value
        if not reached(consumer, ends):
            raise TimeoutError(f"could not read {topic} to its end within {READ_TIMEOUT:.0f} s")
    finally:
        consumer.close()


def summary(letters: Iterable[DeadLetter]) -> Counter[tuple[str, str, bool]]:
    """How many dead letters there are by (stage, reason, resolved already: re-driven or fixed)."""
    return Counter((d.record["stage"], d.record["error_kind"], d.resolved) for d in letters)


@dataclass
class Redrive:
    """What a re-drive republished and what it left alone (with why)."""

    republished: list[str]  # prompt ids (generate) or record ids (sink)
    skipped: list[tuple[DeadLetter, str]]
    already: list[DeadLetter]  # re-driven by an earlier run, so left alone
    fixed: list[DeadLetter] = field(default_factory=list)  # produce letters whose line was fixed since


def redrive(kafka: KafkaConfig, letters: Iterable[DeadLetter], *, again: bool = False,
            send: Callable[[str, bytes | None, bytes], None] | None = None) -> Redrive:
    """Republish the originals of ``letters`` where they came from, and mark them re-driven (module doc).

    Args:
        kafka: the pipeline's broker and topics.
        letters: the selected dead letters.
        again: re-drive letters an earlier re-drive marked too (else they are left alone).
        send: publishes one record (a test seam; an idempotent producer when None).
    """
    result = Redrive(republished=[], skipped=[], already=[])
    plan: dict[str, tuple[str, bytes | None, bytes]] = {}  # one republish per prompt / record
    marked: dict[str, str] = {}  # letter position → the topic its original went to
    targets = {"generate": kafka.prompts_topic, "sink": kafka.generations_topic,
               "converse": kafka.generations_topic}
    for letter in letters:
        rec = letter.record
        target = targets.get(rec["stage"])
        if letter.fixed is not None:  # nothing to re-drive, also with ``again``: the fixed row is published
            result.fixed.append(letter)
        elif letter.redriven is not None and not again:
            result.already.append(letter)
        elif target is None:
            result.skipped.append((letter, f"fix {rec['source']} line {rec['line']} and run produce again"))
        elif rec["topic"] != target or not rec["value"]:
            result.skipped.append((letter, f"its original is not a record of {target}"))
        elif rec["stage"] == "generate" and letter.prompt_id is None:
            result.skipped.append((letter, "its original is not a readable PromptRecord"))
        else:
            plan.setdefault(letter.prompt_id if rec["stage"] == "generate" else  # type: ignore[arg-type]
                            f"{rec['topic']}:{rec['record_id'] or letter.position}",
                            (target, rec["key"], rec["value"]))
            marked[letter.position] = target
    if plan:
        _publish(kafka, list(plan.values()), send)
        # only once the originals are acknowledged: a marker never covers a letter not re-driven
        now = int(time.time() * 1000)
        if send is None:
            topic = kafka.redriven_topic
            ensure_topics(kafka, {topic: 1}, configs={topic: MARKER_TOPIC_CONFIG})
        _publish(kafka, [(kafka.redriven_topic, *redrive_marker(position, to=to, at_ms=now))
                         for position, to in marked.items()], send)
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
