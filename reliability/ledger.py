"""The books of a scenario: every input must end as exactly one training row or a dead letter.

A *unit* is one sample of one input line (``samples`` per line), or one record injected straight
into a topic. Rows lead back to their line through ``source``/``source_row`` (or, for injected
prompts, their ``prompt_id``); dead letters through ``source``/``line`` (producer), the original
record they carry (worker, sink) or the topic/partition/offset of an injected record.

A multi-turn line fed with ``--history rerender`` (a *conversation*) has one unit per turn the
model generated: how many that is, the converse stage says in the lane's ``ended`` event on the
conversations topic (complete, truncated, or dead_letter: then the failed turn must be a dead
letter). Until that event arrives the conversation is missing; a row of a turn past its end is
unexpected.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from kafka import KafkaConsumer, TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import connection_settings
from eaglefeed.dataset.collect import collect
from eaglefeed.dataset.hidden_states import STORE, HiddenStatesRef, problem
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.schemas import CONVERSATION_EVENT, DEAD_LETTER, GENERATION, PROMPT
from reliability.inputs import expected_row_id

Unit = tuple[Any, ...]
_COLUMNS = ["id", "prompt_id", "sample_index", "source", "source_row", "turn_index"]


@dataclass(frozen=True)
class Outcome:
    """How a scenario's inputs ended."""

    inputs: int  # prompt lines + records injected into topics
    samples: int  # generations asked for per prompt line
    units: int  # what must come out: lines × samples + injected records
    rows_out: int  # rows in the dataset's live segments
    dead_lettered: int  # units without a row that have a dead letter
    duplicates: int  # extra rows of one id, plus units that got rows under two ids
    missing: int  # units with neither a row nor a dead letter
    unexpected: int  # rows that no input accounts for
    lettered_and_row: int  # units with a row and also a (stale) dead letter: allowed, reported
    letter_kinds: dict[str, int] = field(default_factory=dict)
    state_problems: int = 0  # capture runs: rows whose hidden states are absent, missing or do not match
    state_orphans: int = 0  # capture runs: files no row names, left after ``eaglefeed gc`` (must be 0)
    states_collected: int = 0  # capture runs: unnamed files gc deleted (retries, duplicates, kills)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing doubled, nothing invented, and the counts add up."""
        counted = self.rows_out - self.duplicates - self.unexpected + self.dead_lettered
        states = self.state_problems == 0 and self.state_orphans == 0
        return (self.missing == 0 and self.duplicates == 0 and self.unexpected == 0 and counted == self.units
                and states)


class Expected:
    """What went in: prompt lines by file and line number, and records injected into topics.

    Args:
        samples: generations asked for per prompt line.
    """

    def __init__(self, *, samples: int) -> None:
        self.samples = samples
        self.lines: dict[tuple[str, int], str] = {}  # (source, line) → the row id it carries
        self.by_row: dict[tuple[str, str], int] = {}  # (source, row id) → line
        self.injected: dict[tuple[str, int, int], str | None] = {}  # (topic, partition, offset) → prompt_id
        self.conversation_sources: set[str] = set()  # files fed to a --history rerender producer
        self.conversations: dict[tuple[str, str], int] = {}  # (source, row id) → line
        self.conversation_lines: dict[tuple[str, int], str] = {}  # (source, line) → row id

    def add_lines(self, source: Path, first: int, lines: list[bytes]) -> None:
        """Note ``lines`` of ``source`` numbered from ``first`` (blank lines are not inputs)."""
        for i, raw in enumerate(lines):
            if raw.strip():
                row_id = expected_row_id(first + i, raw)
                self.lines[(str(source), first + i)] = row_id
                self.by_row[(str(source), row_id)] = first + i

    def add_conversations(self, source: Path, first: int, lines: list[bytes]) -> None:
        """Note multi-turn ``lines`` of ``source`` (a ``--history rerender`` input) from line ``first``."""
        self.conversation_sources.add(str(source))
        for i, raw in enumerate(lines):
            row_id = expected_row_id(first + i, raw)
            self.conversations[(str(source), row_id)] = first + i
            self.conversation_lines[(str(source), first + i)] = row_id

    def add_injected(self, topic: str, partition: int, offset: int, prompt_id: str | None = None) -> None:
        """Note a record written straight into ``topic`` (a well-formed prompt names its ``prompt_id``)."""
        self.injected[(topic, partition, offset)] = prompt_id

    @property
    def inputs(self) -> int:
        """Input lines (conversations too) plus injected records."""
        return len(self.lines) + len(self.conversations) + len(self.injected)

    def units(self) -> list[Unit]:
        """Every unit that must end as a row or a dead letter."""
        out: list[Unit] = [("line", src, line, i) for (src, line) in self.lines for i in range(self.samples)]
        return out + [("injected", *key) for key in self.injected]


class Books:
    """Read the dataset and the dead-letter topic (incrementally) and settle them against ``expected``.

    Args:
        expected: the inputs.
        dataset: the sink's output directory.
        kafka: broker and topic names of the scenario.
    """

    def __init__(self, *, expected: Expected, dataset: Path, kafka: KafkaConfig,
                 capture: bool = False) -> None:
        self.expected = expected
        self.dataset = dataset
        self.kafka = kafka
        self.capture = capture  # every row must reference hidden states that exist and match
        self.state_problems: list[str] = []
        self.state_orphans = 0
        self.states_collected = 0
        self.rows = 0
        self.ids: Counter[str] = Counter()
        self.row_units: dict[Unit, set[str]] = {}
        self.unexpected = 0
        self.letter_units: set[Unit] = set()
        self.letter_kinds: Counter[str] = Counter()
        self._read_files: set[str] = set()
        self._by_prompt = {pid: key for key, pid in expected.injected.items() if pid}
        self._consumer: KafkaConsumer | None = None
        # conversation (source, line) → (outcome, turns, reason) of its ended event
        self.ended: dict[tuple[str, int], tuple[str, int, str]] = {}
        self.conversation_lettered: set[tuple[str, int]] = set()  # conversations the producer dead-lettered

    def refresh(self, budget: float = 5.0) -> None:
        """Read segments written and dead letters published since the last call."""
        self._read_segments()
        self._read_letters(budget)

    def settled(self) -> bool:
        """Whether every unit has a row or a dead letter."""
        return all(u in self.row_units or u in self.letter_units for u in self.units())

    def units(self) -> list[Unit]:
        """Every unit that must end as a row or a dead letter: the expected ones, each conversation's turns.

        A conversation not ended yet is one unit (``"end"``) that nothing can settle: it is missing.
        """
        out = self.expected.units()
        for (src, line) in self.expected.conversation_lines:
            if (src, line) in self.conversation_lettered:
                out.append(("conv", src, line, 0))
                continue
            ended = self.ended.get((src, line))
            if ended is None:
                out.append(("conv", src, line, "end"))
                continue
            outcome, turns, _reason = ended
            out += [("conv", src, line, turn) for turn in range(turns)]
            if outcome == "dead_letter":  # the turn that failed ends as a dead letter
                out.append(("conv", src, line, turns))
        return out

    def outcome(self) -> Outcome:
        """The books as read so far."""
        units = self.units()
        wanted = set(units)
        dead = sum(1 for u in units if u not in self.row_units and u in self.letter_units)
        missing = sum(1 for u in units if u not in self.row_units and u not in self.letter_units)
        both = sum(1 for u in units if u in self.row_units and u in self.letter_units)
        dup = sum(n - 1 for n in self.ids.values()) + sum(len(ids) - 1 for ids in self.row_units.values())
        # Rows of a conversation's turn past the end its lane reported (or of one never ended).
        beyond = sum(len(ids) for u, ids in self.row_units.items() if u[0] == "conv" and u not in wanted)
        return Outcome(inputs=self.expected.inputs, samples=self.expected.samples, units=len(units),
                       rows_out=self.rows,
                       dead_lettered=dead, duplicates=dup, missing=missing,
                       unexpected=self.unexpected + beyond,
                       lettered_and_row=both, letter_kinds=dict(self.letter_kinds),
                       state_problems=len(self.state_problems), state_orphans=self.state_orphans,
                       states_collected=self.states_collected)

    def close(self) -> None:
        """Close the dead-letter consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # --- the dataset ------------------------------------------------------------------
    def _read_segments(self) -> None:
        if not (self.dataset / "manifest.jsonl").exists():
            return
        for rel in live_segments(read_manifest(self.dataset)):
            if rel in self._read_files:
                continue
            columns = [*_COLUMNS, "hidden_states"] if self.capture else _COLUMNS
            table = pq.read_table(self.dataset / rel, columns=columns)
            for row in table.to_pylist():
                self._add_row(row)
                if self.capture:
                    self._check_states(row)
            self._read_files.add(rel)

    def _check_states(self, row: dict[str, Any]) -> None:
        """A capture run's row must name a file that exists and matches its sha256."""
        record = row.get("hidden_states")
        trouble = ("no hidden states" if not record
                   else problem(self.dataset, HiddenStatesRef.from_record(record)))
        if trouble is not None:
            self.state_problems.append(f"{row['id']}: {trouble}")

    def collect_states(self) -> None:
        """Run ``gc`` with no grace (the stages are stopped): what it deleted, and what it left unnamed."""
        summary = collect(self.dataset, grace_seconds=0)
        self.states_collected = summary.deleted
        store = self.dataset / STORE
        present = sum(1 for _ in store.iterdir()) if store.is_dir() else 0
        self.state_orphans = present - summary.referenced
        if summary.missing:
            self.state_problems.append(f"{summary.missing} named files missing after gc")

    def _add_row(self, row: dict[str, Any]) -> None:
        self.rows += 1
        self.ids[row["id"]] += 1
        if row["source"] in self.expected.conversation_sources:
            found = self.expected.conversations.get((row["source"], row["source_row"]))
            if found is None:
                self.unexpected += 1
            else:
                turn: Unit = ("conv", row["source"], found, row["turn_index"])
                self.row_units.setdefault(turn, set()).add(row["id"])
            return
        line = self.expected.by_row.get((row["source"], row["source_row"]))
        if line is not None and 0 <= row["sample_index"] < self.expected.samples:
            unit: Unit | None = ("line", row["source"], line, row["sample_index"])
        elif row["prompt_id"] in self._by_prompt:
            unit = ("injected", *self._by_prompt[row["prompt_id"]])
        else:
            unit = None
        if unit is None:
            self.unexpected += 1
        else:
            self.row_units.setdefault(unit, set()).add(row["id"])

    # --- the dead-letter topic --------------------------------------------------------
    def _read_letters(self, budget: float) -> None:
        consumer = self._dead_letter_consumer()
        if consumer is None:
            return
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200)
            for records in batch.values():
                for rec in records:
                    if rec.topic == self.kafka.conversations_topic:
                        self._add_event(CONVERSATION_EVENT.decode(rec.value))
                    else:
                        self._add_letter(DEAD_LETTER.decode(rec.value))
            if not batch and all(consumer.position(tp) >= end for tp, end in
                                 consumer.end_offsets(list(consumer.assignment())).items()):
                return

    def _dead_letter_consumer(self) -> KafkaConsumer | None:
        if self._consumer is None:
            consumer = KafkaConsumer(**connection_settings(self.kafka), isolation_level="read_committed",
                                     enable_auto_commit=False, auto_offset_reset="earliest")
            parts = consumer.partitions_for_topic(self.kafka.dead_letter_topic)
            if not parts:
                consumer.close()
                return None
            assigned = [TopicPartition(self.kafka.dead_letter_topic, p) for p in sorted(parts)]
            if self.expected.conversation_sources:  # how each conversation ended, from the converse stage
                events = consumer.partitions_for_topic(self.kafka.conversations_topic) or set()
                assigned += [TopicPartition(self.kafka.conversations_topic, p) for p in sorted(events)]
            consumer.assign(assigned)
            self._consumer = consumer
        return self._consumer

    def _add_letter(self, letter: dict[str, Any]) -> None:
        self.letter_kinds[f"{letter['stage']}:{letter['error_kind']}"] += 1
        self.letter_units.update(self._letter_units(letter))

    def _add_event(self, event: dict[str, Any]) -> None:
        """Note a conversation's ``ended`` event (a replay may repeat one: the same values again)."""
        line = self.expected.conversations.get((event["source"], event["source_row"]))
        if event["event"] == "ended" and line is not None:
            self.ended[(event["source"], line)] = (event["outcome"], event["turn_index"], event["reason"])

    def _letter_units(self, letter: dict[str, Any]) -> list[Unit]:
        exp = self.expected
        where = (letter["topic"], letter["partition"], letter["offset"])
        if where in exp.injected:
            return [("injected", *where)]
        if letter["stage"] == "produce" and (letter["source"], letter["line"]) in exp.conversation_lines:
            self.conversation_lettered.add((letter["source"], letter["line"]))
            return [("conv", letter["source"], letter["line"], 0)]
        if letter["stage"] == "produce":
            line = letter["line"]
            if (letter["source"], line) in exp.lines:
                return [("line", letter["source"], line, i) for i in range(exp.samples)]
            return []
        try:  # the original record says which line and sample it was
            original = (PROMPT if letter["stage"] == "generate" else GENERATION).decode(letter["value"])
        except SchemaError:
            return []
        found = exp.conversations.get((original["source"], original["source_row"]))
        if found is not None:  # a conversation's turn: the lane ends with it (its ``ended`` event)
            return [("conv", original["source"], found, original["turn_index"])]
        line = exp.by_row.get((original["source"], original["source_row"]))
        if line is None:
            return []
        if letter["stage"] == "sink":
            samples = [original["sample_index"]]
        else:
            record_id = letter["record_id"] or ""
            tail = record_id.rpartition(":")[2] if ":" in record_id else ""
            samples = [int(tail)] if tail.isdigit() else list(range(exp.samples))
        return [("line", original["source"], line, i) for i in samples]


def generation_copies(kafka: KafkaConfig, budget: float = 30.0) -> tuple[int, int]:
    """(records, distinct record ids) in the generations topic.

    Records beyond one per id were generated (or published) more than once; the sink kept one of each.
    """
    consumer = KafkaConsumer(**connection_settings(kafka), enable_auto_commit=False,
                             isolation_level="read_committed")
    try:
        parts = [TopicPartition(kafka.generations_topic, p)
                 for p in consumer.partitions_for_topic(kafka.generations_topic) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(parts)
        keys: Counter[bytes] = Counter()
        deadline = time.monotonic() + budget
        while any(consumer.position(tp) < ends[tp] for tp in parts) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                keys.update(rec.key for rec in records if rec.key is not None)
    finally:
        consumer.close()
    return sum(keys.values()), len(keys)
