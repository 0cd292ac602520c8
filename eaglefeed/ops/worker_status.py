"""Read ``<prefix>.workers`` into the "workers" section of ``eaglefeed status``: each worker's servers.

Each generate worker publishes a WorkerStatus record every few seconds
(``eaglefeed.consumers.generate.status_report``) to a compacted topic keyed by its id, read as
``eaglefeed.ops.status_topic`` reads every status topic. A record older than a few intervals
of its worker's reports is shown as stale with its age: the worker died, hangs, or
cannot reach Kafka. A server out of rotation shows no running or waiting numbers: the worker no
longer reads them, and the last ones it read are not the server's load any more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eaglefeed.core.clients import Reader
from eaglefeed.core.config import KafkaConfig
from eaglefeed.ops import status_topic
from eaglefeed.ops.status_topic import READ_SECONDS, StatusTopicFeed, age_seconds, is_stale
from eaglefeed.schemas import WORKER_STATUS
from eaglefeed.schemas.worker_status import workers_topic


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
        return age_seconds(report, self.read_at)

    def stale(self, report: dict[str, Any]) -> bool:
        """Whether ``report`` is older than :data:`STALE_INTERVALS` of its worker's interval."""
        return is_stale(report, self.read_at)

    def prompts_in_flight(self) -> int | None:
        """Prompts the fresh reports' workers took and have not finished; None when none says."""
        counts = [r.get("prompts_in_flight") for r in self.reports.values() if not self.stale(r)]
        known = [int(c) for c in counts if c is not None]
        return sum(known) if known else None

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
                # out of rotation, its last running/waiting reading is not its load any more
                running, waiting = (s["running"], s["waiting"]) if s["healthy"] else (None, None)
                note = "" if s["healthy"] else "  out of rotation"
                out.append(f"    {s['url']:<34}{_num(s['limit']):>7}{_num(running):>9}"
                           f"{_num(waiting):>9}{s['in_flight']:>11}{s['rows_done']:>9}{note}")
        return out


def newest_reports(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, dict[str, Any]]:
    """The newest decodable WorkerStatus of each key (as :func:`status_topic.newest_reports`)."""
    return status_topic.newest_reports(records, WORKER_STATUS)


class WorkersFeed:
    """Read the workers topic from its start at every refresh (no consumer group).

    Args:
        kafka: the broker and topic prefix.
        reader: the consumer to read with (a fresh one in no group when None).
        read_seconds: at most this long per read.
    """

    def __init__(self, *, kafka: KafkaConfig, reader: Reader | None = None,
                 read_seconds: float = READ_SECONDS) -> None:
        self._feed = StatusTopicFeed(kafka=kafka, topic=workers_topic(kafka.topic_prefix),
                                     codec=WORKER_STATUS, reader=reader, read_seconds=read_seconds)
        self.topic = self._feed.topic

    def read(self) -> WorkersView:
        """The newest report of each worker; a view without reports while the topic does not exist."""
        exists, reports, read_at = self._feed.read()
        return WorkersView(topic=self.topic, exists=exists, reports=reports, read_at=read_at)

    def close(self) -> None:
        """Close the consumer."""
        self._feed.close()


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
