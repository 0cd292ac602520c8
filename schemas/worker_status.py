"""WorkerStatus records on ``<prefix>.workers``: what each generate worker reports of itself.

The topic is compacted and keyed by the worker's id, so a reader that reads it from the start
keeps the newest record of each key: one per live worker. A worker that stops cleanly writes a
tombstone (a key with no value), so it leaves the list; one that died leaves its last record,
which readers show as stale once it is older than a few of its ``interval_seconds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eaglefeed.schemas import WORKER_STATUS

WORKERS_SUFFIX = ".workers"
WORKERS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    # A tombstone only has to outlive a reader's one short read; kept a minute, it then goes.
    "delete.retention.ms": "60000",
    # Compaction never touches the open segment: roll it often, so the read from the start that
    # ``status`` makes stays a few thousand records long, however long the workers run.
    "segment.ms": "600000",
}
"""Only the newest record of each worker matters, and only while it lives."""


def workers_topic(topic_prefix: str) -> str:
    """The compacted topic of WorkerStatus records of the pipeline of ``topic_prefix``.

    Named here rather than beside the other topics on ``KafkaConfig``: the status records are
    not part of the data path, and nothing but the workers and ``status`` reads or writes them.
    """
    return f"{topic_prefix}{WORKERS_SUFFIX}"


def server_status(*, url: str, healthy: bool, limit: int | None, running: float | None,
                  waiting: float | None, in_flight: int, rows_done: int) -> dict[str, Any]:
    """One server's entry in a WorkerStatus record (None: unknown, or no limit of its own)."""
    return {"url": url, "healthy": healthy, "limit": limit, "running": running, "waiting": waiting,
            "in_flight": in_flight, "rows_done": rows_done}


def worker_status(*, worker_id: str, group_id: str, updated_at: int, interval_seconds: float,
                  concurrency: int | None, prompts_done: int, servers: Sequence[Mapping[str, Any]],
                  prompts_in_flight: int | None = None) -> tuple[bytes, bytes]:
    """An encoded WorkerStatus record and its key (the worker id).

    Args:
        worker_id: the worker's identity (the key, so the newest record per worker is kept).
        group_id: its consumer group.
        updated_at: milliseconds since the Unix epoch.
        interval_seconds: the longest the worker waits between two reports.
        concurrency: ``--concurrency N``; None: ``auto``.
        prompts_done: prompt records finished since it started.
        servers: :func:`server_status` entries; the worker's ``rows_done`` is their sum.
        prompts_in_flight: prompt records taken and not finished yet (None: unknown).

    Raises:
        SchemaError: a field of the wrong type (a caller's bug).
    """
    value = WORKER_STATUS.encode({
        "worker_id": worker_id, "group_id": group_id, "updated_at": updated_at,
        "interval_seconds": interval_seconds, "concurrency": concurrency, "prompts_done": prompts_done,
        "rows_done": sum(int(s["rows_done"]) for s in servers), "servers": [dict(s) for s in servers],
        "prompts_in_flight": prompts_in_flight,
    })
    return worker_id.encode(), value


def worker_tombstone(worker_id: str) -> tuple[bytes, None]:
    """The (key, no value) that removes ``worker_id`` from the topic: it stopped cleanly."""
    return worker_id.encode(), None
