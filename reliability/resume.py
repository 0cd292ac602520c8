"""When each stage moved again after a fault of the cluster, read partition by partition.

A stage has *resumed* once every partition that had work waiting when the fault struck has
moved since: the worker's and the sink's committed offsets (their groups), and for the producer
the end offset of every prompts partition. Partitions on healthy nodes move at once; the ones
the fault took away move only after a new leader (or group coordinator) took over, so the time
is that of the slowest partition: the whole stage moving, not its healthy part. Times count
from the fault's first instant (the SIGKILL), not from its end.

The suite's :class:`reliability.monitor.Monitor` reads everything in one go, so while a dead
node still leads some partitions none of its readings succeed. :class:`ResumeWatch` asks for
each group's offsets and each partition's end offset separately, every quarter second, and
keeps whatever answered: a stage's partitions on healthy nodes are seen moving while the dead
node's are still unknown.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import OffsetSpec
from kafka.structs import TopicPartition

from eaglefeed.core.config import KafkaConfig

log = logging.getLogger(__name__)

STAGES = ("worker", "sink", "producer")
INPUT = {"worker": "prompts", "producer": "prompts", "sink": "generations", "converse": "generations"}
"""The topic each stage's progress is read against (the producer's: the topic it writes)."""


@dataclass
class Reading:
    """What answered at one instant: committed offsets per stage, end offsets per topic (by partition)."""

    t: float
    committed: dict[str, dict[int, int]] = field(default_factory=dict)  # worker/sink → partition → offset
    ends: dict[str, dict[int, int]] = field(default_factory=dict)  # prompts/generations → partition → end


class ResumeWatch:
    """Read the stages' committed offsets and the topics' end offsets piece by piece in a daemon thread.

    Args:
        kafka: the cluster and the pipeline's topics.
        groups: stage (``worker``, ``sink``) → its consumer group.
        partitions: partitions of the prompts and generations topics.
        interval: seconds between readings.
    """

    def __init__(self, *, kafka: KafkaConfig, groups: dict[str, str], partitions: int,
                 interval: float = 0.25) -> None:
        self.kafka = kafka
        self.groups = groups
        self.topics = {"prompts": kafka.prompts_topic, "generations": kafka.generations_topic}
        self.partitions = partitions
        self.interval = interval
        self.readings: list[Reading] = []
        self.stages = (*groups, "producer")  # worker, sink (converse) and the producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reliability-resume", daemon=True)

    def start(self) -> ResumeWatch:
        """Start reading; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=30)

    def resume_times(self, at: float, *, feeding: bool = True) -> dict[str, float | None]:
        """Stage → seconds from ``at`` until it resumed (``inf``: not yet; None: no work to see it by).

        Args:
            at: the fault's first instant (``time.monotonic()``).
            feeding: whether prompt lines were still being appended after ``at`` (else the
                producer had nothing to publish and its resume cannot be seen).
        """
        # A reading that began just after the fault can still show work done just before it: what
        # was done by the fault is what the readings up to one interval after it show.
        cut = at + self.interval
        readings = list(self.readings)
        before = [r for r in readings if r.t <= cut]
        after = [r for r in readings if r.t > cut]
        times: dict[str, float | None] = {}
        for stage in self.stages:
            waiting = _waiting(before, stage, feeding=feeding)
            if not waiting:  # caught up at the fault: it resumed once it took in work that came after
                waiting = _arrived(before, after, stage)
            if not waiting:
                times[stage] = None
                continue
            moved = []
            for partition, value in waiting.items():
                first = next((r.t for r in after if _value(r, stage, partition) > value), None)
                moved.append(float("inf") if first is None else first - at)
            times[stage] = max(moved)
        return times

    def longest_stall(self, start: float, end: float) -> dict[str, float | None]:
        """Stage → the longest time in ``[start, end]`` one of its partitions stood still with work waiting.

        A partition stands still from ``start`` or the first reading at which it had work
        waiting (a committed offset below the end offset last seen; for the producer, always:
        prompts keep coming) until the next reading that shows it moved, or ``end``. None: the
        stage was not seen.
        """
        readings = [r for r in self.readings if start <= r.t <= end]
        stalls: dict[str, float | None] = {}
        for stage in self.stages:
            spans = self.stalls(stage, start, end)
            if spans:
                stalls[stage] = max(until - since for _partition, since, until in spans)
            else:  # 0.0 once any of its partitions answered; None when it was never seen
                seen = any(_value(r, stage, p) >= 0 for r in readings for p in range(self.partitions))
                stalls[stage] = 0.0 if seen else None
        return stalls

    def stalls(self, stage: str, start: float, end: float) -> list[tuple[int, float, float]]:
        """Every time in ``[start, end]`` one of ``stage``'s partitions stood still with work waiting.

        The reading of the offsets :meth:`longest_stall` takes its figure from, interval by interval:
        ``(partition, since, until)``, where ``until`` is the reading that showed it moved
        again, or ``end`` for a stall still going on.
        """
        readings = [r for r in self.readings if start <= r.t <= end]
        earlier = [r for r in self.readings if r.t < start]
        topic = INPUT[stage]
        ends_before = _latest(earlier, lambda r: r.ends.get(topic))
        values_before = (ends_before if stage == "producer"
                         else _latest(earlier, lambda r: r.committed.get(stage)))
        out = []
        for partition in range(self.partitions):
            value: int | None = values_before.get(partition)
            last_end = ends_before.get(partition, -1)
            work = value is not None and (stage == "producer" or value < last_end)
            since: float | None = start if work else None
            for r in readings:
                last_end = _end(r, stage, partition, last_end)
                now = _value(r, stage, partition)
                if now < 0:
                    continue  # this piece did not answer: standing still as far as anyone can see
                if value is not None and now > value and since is not None:
                    out.append((partition, since, r.t))
                if value is None or now > value:
                    since = None
                value = now
                if since is None and (stage == "producer" or now < last_end):
                    since = r.t
            if since is not None:
                out.append((partition, since, end))
        return out

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between two readings in ``[start, end]`` (failed pieces included)."""
        stamps = [r.t for r in self.readings if start <= r.t <= end]
        return max((b - a for a, b in zip(stamps, stamps[1:], strict=False)), default=0.0)

    def dump(self, path: Path, *, since: float) -> None:
        """Write the readings as JSON lines (``t`` in seconds after ``since``)."""
        with open(path, "w") as out:
            for r in self.readings:
                line = {"t": round(r.t - since, 3), "committed": r.committed, "ends": r.ends}
                out.write(json.dumps(line) + "\n")

    def _run(self) -> None:
        admin: KafkaAdminClient | None = None
        while not self._stop.is_set():
            try:
                admin = admin or KafkaAdminClient(bootstrap_servers=self.kafka.bootstrap_servers,
                                                  client_id="reliability-resume", request_timeout_ms=2000)
            except Exception as exc:  # noqa: BLE001 - every node may be unreachable for a moment
                log.debug("resume watch: cannot connect (%r)", exc)
                self._stop.wait(self.interval)
                continue
            reading, failures = self._read(admin)
            self.readings.append(reading)
            if failures:  # kafka-python's admin client can keep asking a stopped coordinator: start over
                admin.close()
                admin = None
            self._stop.wait(self.interval)
        if admin is not None:
            admin.close()

    def _read(self, admin: KafkaAdminClient) -> tuple[Reading, int]:
        """One reading, piece by piece; returns it and how many pieces failed."""
        reading = Reading(t=time.monotonic())
        failures = 0
        for stage, group in self.groups.items():
            try:
                self._committed(admin, group, stage, reading)
            except Exception as exc:  # noqa: BLE001 - a dead coordinator: unknown for now
                log.debug("resume watch: %s offsets: %r", group, exc)
                failures += 1
        for name, topic in self.topics.items():
            for partition in range(self.partitions):
                try:
                    self._end(admin, name, topic, partition, reading)
                except Exception as exc:  # noqa: BLE001 - a dead leader: unknown for now
                    log.debug("resume watch: end of %s-%d: %r", topic, partition, exc)
                    failures += 1
        return reading, failures

    def _committed(self, admin: KafkaAdminClient, group: str, stage: str, reading: Reading) -> None:
        found = admin.list_group_offsets({group: None}).get(group, {})
        topic = self.topics[INPUT[stage]]
        reading.committed[stage] = {tp.partition: max(0, int(meta.offset)) for tp, meta in found.items()
                                    if tp.topic == topic}

    @staticmethod
    def _end(admin: KafkaAdminClient, name: str, topic: str, partition: int, reading: Reading) -> None:
        found = admin.list_partition_offsets({TopicPartition(topic, partition): OffsetSpec.LATEST})
        for tp, result in found.items():
            reading.ends.setdefault(name, {})[tp.partition] = int(result.offset)


def _waiting(before: list[Reading], stage: str, *, feeding: bool) -> dict[int, int]:
    """Partition → its value just before the fault, for the partitions where ``stage`` had work waiting."""
    source = INPUT[stage]
    ends = _latest(before, lambda r: r.ends.get(source))
    if stage == "producer":
        return dict(ends) if feeding else {}
    committed = _latest(before, lambda r: r.committed.get(stage))
    return {p: c for p, c in committed.items() if c < ends.get(p, 0)}


def _arrived(before: list[Reading], after: list[Reading], stage: str) -> dict[int, int]:
    """Partition → ``stage``'s value just before the fault, for the partitions whose input grew past it after.

    For a stage that had nothing waiting when the fault struck (a worker keeping up with the
    feed): the work the feed brought later is what shows it moving again.
    """
    if stage == "producer":
        return {}
    committed = _latest(before, lambda r: r.committed.get(stage))
    grown = _latest(after, lambda r: r.ends.get(INPUT[stage]))
    return {p: c for p, c in committed.items() if grown.get(p, 0) > c}


def _latest(readings: list[Reading], piece: Callable[[Reading], dict[int, int] | None]) -> dict[int, int]:
    """Per partition, the latest value of ``piece(reading)`` among ``readings``."""
    values: dict[int, int] = {}
    for reading in readings:
        values.update(piece(reading) or {})
    return values


def _end(reading: Reading, stage: str, partition: int, default: int) -> int:
    """The end offset of ``stage``'s input partition at ``reading`` (``default`` when it did not answer)."""
    return reading.ends.get(INPUT[stage], {}).get(partition, default)


def _value(reading: Reading, stage: str, partition: int) -> int:
    if stage == "producer":
        return reading.ends.get("prompts", {}).get(partition, -1)
    return reading.committed.get(stage, {}).get(partition, -1)
