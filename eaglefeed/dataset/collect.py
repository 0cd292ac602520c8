"""``eaglefeed gc``: delete hidden-state files no row of the dataset names; never one a row names.

Files nobody names come from attempts that failed a check (retried), samples dead-lettered after
capture, records published twice (the sink keeps one), rows compaction dropped, and writes a crash
cut short (``*.tmp``). A file is only collected once it is older than the grace period: a record
still on its way through Kafka names a file that no committed row names yet, and deleting it
would stop the sink (``consumers/sink/segments.py``). The references are read from the manifest's
live files under the snapshot lock, so a compaction cannot move rows out of sight meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.hidden_states import STORE
from eaglefeed.dataset.snapshot import snapshot
from eaglefeed.dataset.store.mirror import mirror_of

DEFAULT_GRACE_SECONDS = 24 * 3600.0
"""How old an unnamed file must be before it is collected (records may wait in Kafka that long)."""


@dataclass
class CollectSummary:
    """What a collection found and did."""

    referenced: int = 0  # files that rows name (kept)
    deleted: int = 0
    deleted_bytes: int = 0
    young: int = 0  # unnamed, but within the grace period (kept)
    missing: int = 0  # named by a row and absent: the dataset has lost states


def collect(root: Path, *, grace_seconds: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False,
            now: float | None = None) -> CollectSummary:
    """Delete the files of ``root``'s store that no live row names and are older than ``grace_seconds``.

    Raises:
        DatasetError: ``root`` is not a dataset, or one of its files cannot be read.
    """
    summary = CollectSummary()
    now = time.time() if now is None else now
    remote = mirror_of(Path(root))
    with snapshot(Path(root)) as files:
        named = _named(files)
        if remote is not None:  # a dataset in an object store: its states are there
            found = [(obj.rel, obj.size, obj.modified) for obj in remote.store.listing(STORE)]
        else:
            found = list(_local_files(Path(root) / STORE))
        present = set()
        for uri, size, modified in found:
            if uri in named:
                summary.referenced += 1
                present.add(uri)
                continue
            if now - modified < grace_seconds:
                summary.young += 1
                continue
            summary.deleted += 1
            summary.deleted_bytes += size
            if not dry_run:
                if remote is not None:
                    remote.store.delete(uri)
                (Path(root) / uri).unlink(missing_ok=True)
        summary.missing = len(named - present)
    return summary


def _local_files(store: Path) -> Iterator[tuple[str, int, float]]:
    """``(uri, bytes, mtime)`` of each file in a local store folder (none when it does not exist)."""
    if not store.is_dir():
        return
    for path in store.iterdir():
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # a .tmp renamed meanwhile
        yield f"{STORE}/{path.name}", stat.st_size, stat.st_mtime


def _named(files: list[Path]) -> set[str]:
    """Every ``hidden_states.uri`` the rows of ``files`` name."""
    named: set[str] = set()
    for path in files:
        try:
            schema = pq.read_schema(path)
            if "hidden_states" not in schema.names:
                continue
            column = pq.read_table(path, columns=["hidden_states"]).column("hidden_states")
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: cannot be read: {exc}") from exc
        named.update(ref["uri"] for ref in column.to_pylist() if ref)
    return named
