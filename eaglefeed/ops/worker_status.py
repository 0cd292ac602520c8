"""Read ``<prefix>.workers`` into the "workers" section of ``eaglefeed status``: each worker's servers.

Each generate worker publishes a WorkerStatus record every few seconds
(``eaglefeed.consumers.generate.status_report``) to a compacted topic keyed by its id, and a
tombstone when it stops cleanly. Every refresh reads the topic from its start to its end offsets
(compaction keeps it to about one record per worker) and keeps the newest record of each key.
A record older than ``STALE_INTERVALS`` of its worker's report interval is shown as stale with
its age: the worker died, hangs, or cannot reach Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.clients import Reader
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import make_consumer
from eaglefeed.ops.read_to_end import records_to
from eaglefeed.schemas import WORKER_STATUS
from eaglefeed.schemas.worker_status import workers_topic

log = logging.getLogger(__name__)

READ_SECONDS = 5.0
"""At most this long per refresh: a screen comes even from a broker that answers slowly."""
STALE_INTERVALS = 3.0
"""A report older than this many of its worker's intervals is stale (two lost ones are noise)."""


@dataclass(frozen=True)
class WorkersView:
    """The newest report of every worker that has not stopped cleanly, as read at ``read_at``.

    Args:
        topic: the topic read.
        exists: False when the topic does not exist (no worker of this version ever ran).
        reports: decoded WorkerStatus records, by worker id.
        read_at: milliseconds since the Unix epoch when it was read.
    """

    topic: str
    exists: bool
    reports: dict[str, dict[str, Any]]
    read_at: int

    def age(self, report: dict[str, Any]) -> float:
        """Seconds since ``report`` was written (by the worker's clock; never negative)."""
        return max(0.0, (self.read_at - int(report["updated_at"])) / 1000)

    def stale(self, report: dict[str, Any]) -> bool:
        """Whether ``report`` is older than :data:`STALE_INTERVALS` of its worker's interval."""
        return self.age(report) > STALE_INTERVALS * float(report["interval_seconds"])

    def as_dict(self) -> dict[str, Any]:
        """The same data as :meth:`lines`, for a machine: every report with its age and staleness."""
        return {"topic": self.topic, "exists": self.exists,
                "workers": [{**r, "age_seconds": round(self.age(r), 1), "stale": self.stale(r)}
                            for _, r in sorted(self.reports.items())]}

    def lines(self) -> list[str]:
        """The status screen's lines about the workers."""
        if not self.reports:
            why = "" if self.exists else " (the topic does not exist: no worker of this version ran yet)"
            return [f"workers: no worker reports in {self.topic}{why}"]
        stale = sum(1 for r in self.reports.values() if self.stale(r))
        out = [f"workers: {len(self.reports)} reporting in {self.topic}"
               + (f", {stale} of them stale" if stale else "")]
        for worker_id, r in sorted(self.reports.items()):
            mode = "auto" if r["concurrency"] is None else f"fixed {r['concurrency']}"
            age = _age(self.age(r))
            when = f"STALE: last report {age} ago" if self.stale(r) else f"{age} ago"
            out.append(f"  {worker_id:<28} {mode:<10} prompts {r['prompts_done']:>8}  "
                       f"rows {r['rows_done']:>8}  {when}")
            if self.stale(r):
                continue  # its numbers are old: the age is what to show
            out.append(f"    {'server':<34}{'limit':>7}{'running':>9}{'waiting':>9}{'in flight':>11}"
                       f"{'rows':>9}")
            for s in r["servers"]:
                note = "" if s["healthy"] else "  out of rotation"
                out.append(f"    {s['url']:<34}{_num(s['limit']):>7}{_num(s['running']):>9}"
                           f"{_num(s['waiting']):>9}{s['in_flight']:>11}{s['rows_done']:>9}{note}")
        return out


def newest_reports(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, dict[str, Any]]:
    """The newest decodable record of each key, in topic order; a tombstone removes its key.

    A record this version cannot decode (a newer writer) leaves the key's earlier one out too:
    an old report would be shown as if it were the newest.
    """
    reports: dict[str, dict[str, Any]] = {}
    for key, value in records:
        name = (key or b"").decode(errors="replace")
        reports.pop(name, None)
        if value is None:
            continue
        try:
            reports[name] = WORKER_STATUS.decode(value)
        except SchemaError:
            pass
    return reports


class WorkersFeed:
    """Read the workers topic from its start at every refresh (no consumer group).

    Args:
        kafka: the broker and topic prefix.
        reader: the consumer to read with (a fresh one in no group when None).
        read_seconds: at most this long per read.
    """

    def __init__(self, *, kafka: KafkaConfig, reader: Reader | None = None,
                 read_seconds: float = READ_SECONDS) -> None:
        self.topic = workers_topic(kafka.topic_prefix)
        self._reader: Reader = reader if reader is not None else make_consumer(
            kafka, None, enable_auto_commit=False)
        self._assigned: list[TopicPartition] = []
        self.read_seconds = read_seconds

    def read(self) -> WorkersView:
        """The newest report of each worker; a view without reports while the topic does not exist."""
        records: list[tuple[bytes | None, bytes | None]] = []
        exists = bool(self._assigned)
        try:
            if not self._assigned:
                partitions = self._reader.partitions_for_topic(self.topic)
                exists = bool(partitions)
                if not partitions:
                    return WorkersView(topic=self.topic, exists=False, reports={}, read_at=_now_ms())
                self._assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
                self._reader.assign(self._assigned)
            starts = self._reader.beginning_offsets(self._assigned)
            ends = self._reader.end_offsets(self._assigned)
            for tp in self._assigned:
                self._reader.seek(tp, starts[tp])
            records.extend((rec.key, rec.value)
                           for _, rec in records_to(self._reader, ends, seconds=self.read_seconds))
        except KafkaError as exc:
            log.warning("cannot read %s (%r)", self.topic, exc)
        return WorkersView(topic=self.topic, exists=exists, reports=newest_reports(records),
                           read_at=_now_ms())

    def close(self) -> None:
        """Close the consumer."""
        self._reader.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
