"""``eaglefeed compact``: merge small segments into training shards, optionally dropping rows.

Safe while sinks write the same dataset. For each group of inputs:
    1. stream the inputs into a new shard (temp file, fsync, rename into ``segments/``),
       counting its loss tokens into ``freq/`` (see ``eaglefeed.dataset.freq``), and the ids of filtered
       rows into ``dropped/`` (so the sink never writes them again);
    2. append one manifest event that adds the shard and removes its inputs (checked under
       the manifest lock: every input must still be live);
    3. delete the inputs, once no reader holds the dataset open (else a later run does).
A reader that lists files from the manifest sees either the inputs or the shard, never both.
A crash before 2 leaves an unlisted shard, which the next compaction deletes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eaglefeed.core.config import DEFAULT_COMPACT_TARGET_BYTES, DEFAULT_STORE_GRACE_SECONDS
from eaglefeed.core.errors import CompactionBusyError, DatasetError, ManifestError
from eaglefeed.dataset import freq, manifest
from eaglefeed.dataset.shards import SEGMENTS, TRAINING_SCHEMA, ParquetFile, conform
from eaglefeed.dataset.snapshot import iter_batches
from eaglefeed.dataset.store.mirror import mirror_of

log = logging.getLogger(__name__)

DROPPED = "dropped"
DROPPED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()),
                            ("finish_reason", pa.string()), ("loss_tokens", pa.int32())])
SHARD_PREFIX = "shard-"


@dataclass(frozen=True)
class CompactOptions:
    """What to merge and what to drop.

    Attributes:
        target_bytes: a shard is closed once its inputs add up to this many bytes.
        drop_finish_reasons: rows with one of these finish reasons are dropped.
        min_loss_tokens: rows with fewer generated (mask 1) ids are dropped.
        include_partial: also merge a last group smaller than the target (say, once the sink
            has stopped); otherwise it waits for more segments.
        row_group_bytes: uncompressed bytes buffered per row group (bounds memory).
        store_grace_seconds: in a dataset whose home is an object store, how long the store keeps
            a file compacted away (the mirror's copy goes at once): readers on other hosts, whose
            snapshots no lock of this host covers, may still be reading it.
    """

    target_bytes: int = DEFAULT_COMPACT_TARGET_BYTES
    drop_finish_reasons: frozenset[str] = frozenset()
    min_loss_tokens: int = 0
    include_partial: bool = False
    row_group_bytes: int = 64 * 1024 * 1024
    store_grace_seconds: float = DEFAULT_STORE_GRACE_SECONDS

    @property
    def filter(self) -> dict[str, Any]:
        """The row filter as recorded on each shard."""
        return {"drop_finish_reasons": sorted(self.drop_finish_reasons),
                "min_loss_tokens": self.min_loss_tokens}


@dataclass
class CompactSummary:
    """What one compaction did."""

    shards: int = 0
    inputs: int = 0
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    deleted: int = 0


def compact(root: Path, options: CompactOptions, *,
            hook: Callable[[str], None] | None = None) -> CompactSummary:
    """Merge the live segments of ``root`` into shards of about ``options.target_bytes``.

    Args:
        root: the dataset directory.
        options: sizes and filters.
        hook: test-only, called with ``after_rename`` and ``after_manifest`` (raise to simulate a crash).

    Raises:
        CompactionBusyError: another compaction is running on ``root``.
        DatasetError: ``root`` has no manifest.
    """
    root = Path(root)
    if not (root / manifest.MANIFEST).is_file():  # a mistyped path: never create the folder
        raise DatasetError(f"{root} is not an eaglefeed dataset (no {manifest.MANIFEST})")
    summary = CompactSummary()
    with manifest.locked(root, manifest.COMPACT_LOCK, wait=False) as ours:
        if not ours:
            raise CompactionBusyError(f"another compaction is running on {root}")
        summary.deleted += collect_garbage(root, store_grace_seconds=options.store_grace_seconds)
        for group in plan(manifest.live_segments(manifest.read_manifest(root)), options):
            _merge(root, group, options, summary, hook or (lambda _step: None))
        summary.deleted += collect_garbage(root, store_grace_seconds=options.store_grace_seconds)
    return summary


def plan(live: dict[str, dict[str, Any]], options: CompactOptions) -> list[list[dict[str, Any]]]:
    """Groups of live files to merge, in manifest order, each adding up to about the target size.

    A file at or above the target is left alone unless the filter has not been applied to it yet.
    """
    groups, current, size = [], [], 0
    for entry in live.values():
        payload = entry.get("data_bytes", entry["bytes"])  # a small file is mostly footer
        if payload >= options.target_bytes:
            if _needs_filter(entry, options):
                groups.append([entry])
            continue
        current.append(entry)
        size += payload
        if size >= options.target_bytes:
            groups.append(current)
            current, size = [], 0
    if current and options.include_partial and (
            len(current) > 1 or _needs_filter(current[0], options)):
        groups.append(current)
    return groups


def collect_garbage(root: Path, *, store_grace_seconds: float = DEFAULT_STORE_GRACE_SECONDS,
                    now: float | None = None) -> int:
    """Delete files the manifest no longer (or never, for compaction output) lists; skipped while read.

    Sink segments that were never listed are left alone: a sink may be about to list them. In a
    dataset whose home is an object store, the store's copy of a file compacted away is deleted
    only ``store_grace_seconds`` after the event that removed it (a later run deletes it): readers
    on other hosts hold no lock of this one. Compaction output never listed goes at once (no reader
    could know it).

    Returns:
        how many files were deleted (from the directory or the store).
    """
    root = Path(root)
    now = time.time() if now is None else now
    deleted = 0
    with manifest.locked(root, manifest.GC_LOCK, wait=False) as free:
        if not free:
            log.info("readers hold %s: deleting compacted files later", root)
            return 0
        events = manifest.read_manifest(root)
        live_entries = manifest.live_segments(events).values()
        live = {e["path"] for e in live_entries} | freq.sidecar_paths(live_entries)
        known = manifest.ever_added(events) | freq.sidecar_paths(
            seg for event in events for seg in event.get("added", ()))
        kept_dropped = {d["path"] for d in manifest.dropped_files(events)}
        remote = mirror_of(root)  # a dataset in an object store: its copies there go too
        removed_at = _removal_times(events) if remote is not None else {}
        for folder in (SEGMENTS, DROPPED, freq.FREQ):
            base = root / folder
            local = {path.name for path in base.iterdir()} if base.is_dir() else set()
            stored = {rel.rpartition("/")[2] for rel in remote.store.paths(folder)} if remote else set()
            for name in sorted(local | stored):
                rel = f"{folder}/{name}"
                ours = name.lstrip(".").startswith(SHARD_PREFIX) or folder == DROPPED
                if rel in live or rel in kept_dropped or not (rel in known or ours):
                    continue
                if name in local:
                    (base / name).unlink(missing_ok=True)
                    deleted += 1
                if (remote is not None and name in stored
                        and now - removed_at.get(rel, float("-inf")) >= store_grace_seconds):
                    remote.delete(rel)
                    deleted += name not in local
    return deleted


def _removal_times(events: list[dict[str, Any]]) -> dict[str, float]:
    """When each file compacted away left the dataset: its removing event's time (seconds)."""
    times: dict[str, float] = {}
    for event in events:
        at = event.get("at", 0) / 1000
        for rel in event.get("removed", ()):
            times[rel] = at
            times[f"{freq.FREQ}/{rel.rpartition('/')[2].removesuffix('.parquet')}.npz"] = at
    return times


def _merge(root: Path, group: list[dict[str, Any]], options: CompactOptions, summary: CompactSummary,
           hook: Callable[[str], None]) -> None:
    paths = [e["path"] for e in group]
    key = hashlib.sha256(json.dumps([paths, options.filter]).encode()).hexdigest()[:20]
    name = f"{SHARD_PREFIX}{key}.parquet"
    reasons: Counter[str] = Counter()
    dropped_entry = None
    counts = freq.TokenCounter()
    with ParquetFile(root, name) as shard, _DroppedIds(root, name) as dropped:
        pending: list[pa.Table] = []
        pending_bytes = 0
        for batch in iter_batches([root / p for p in paths], batch_rows=512):
            table = conform(pa.Table.from_batches([batch]), TRAINING_SCHEMA).cast(TRAINING_SCHEMA)
            kept, lost = _split(table, options)
            for reason in lost.column("reason").to_pylist():
                reasons[reason] += 1
            dropped.write(lost)
            freq.count_table(kept, counts)
            pending.append(kept)
            pending_bytes += kept.nbytes
            if pending_bytes >= options.row_group_bytes:
                shard.write(pa.concat_tables(pending))
                pending, pending_bytes = [], 0
        if pending:
            shard.write(pa.concat_tables(pending))
    added = []
    if shard.rows:
        added = [shard.entry | {"filter": options.filter, freq.FREQ: freq.write_sidecar(root, name, counts)}]
    hook("after_rename")
    if dropped.rows:
        dropped_entry = {"path": dropped.entry["path"], "rows": dropped.rows, "reasons": dict(reasons)}
    try:
        manifest.append_manifest(root, {"kind": "compact", "added": added, "removed": paths,
                                        "dropped": dropped_entry}, expect_live=paths)
    except ManifestError:
        shard.final.unlink(missing_ok=True)
        for entry in added:
            (root / entry[freq.FREQ]).unlink(missing_ok=True)
        raise
    hook("after_manifest")
    if not shard.rows:
        shard.final.unlink(missing_ok=True)
    summary.shards += bool(shard.rows)
    summary.inputs += len(group)
    summary.rows_in += sum(e["rows"] for e in group)
    summary.rows_out += shard.rows
    summary.bytes_in += sum(e["bytes"] for e in group)
    summary.bytes_out += shard.entry.get("bytes", 0) if shard.rows else 0
    summary.dropped.update(reasons)
    log.info("compacted %d files (%d rows) into %s (%d rows)", len(group), sum(e["rows"] for e in group),
             name, shard.rows)


def _split(table: pa.Table, options: CompactOptions) -> tuple[pa.Table, pa.Table]:
    """Rows to keep, and a DROPPED_SCHEMA table of the rows the filter removes."""
    loss = pc.subtract(table.column("seq_len"), table.column("prompt_len"))
    by_finish = pc.is_in(table.column("finish_reason"),
                         value_set=pa.array(sorted(options.drop_finish_reasons), pa.string()))
    too_short = pc.less(loss, options.min_loss_tokens)
    lost = pc.or_(by_finish, too_short)
    finish = pc.binary_join_element_wise("finish_reason:", table.column("finish_reason"), "")
    reason = pc.if_else(by_finish, finish, pa.scalar("min_loss_tokens"))
    dropped = pa.table({"id": table.column("id"), "reason": reason,
                        "finish_reason": table.column("finish_reason"), "loss_tokens": loss},
                       schema=DROPPED_SCHEMA).filter(lost)
    return table.filter(pc.invert(lost)), dropped


class _DroppedIds:
    """The ``dropped/`` file of one shard, created only if a row is dropped."""

    def __init__(self, root: Path, shard_name: str) -> None:
        self.root, self.name = root, shard_name
        self.file: ParquetFile | None = None
        self.rows = 0
        self.entry: dict[str, Any] = {}

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            if self.file is None:
                self.file = ParquetFile(self.root, self.name, folder=DROPPED, schema=DROPPED_SCHEMA)
            self.file.write(table)
            self.rows += table.num_rows

    def __enter__(self) -> _DroppedIds:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.file is not None:
            self.file.__exit__(*exc)
            self.entry = self.file.entry


def _needs_filter(entry: dict[str, Any], options: CompactOptions) -> bool:
    filtering = bool(options.drop_finish_reasons or options.min_loss_tokens)
    return filtering and not _covers(entry.get("filter"), options)


def _covers(applied: dict[str, Any] | None, options: CompactOptions) -> bool:
    """Whether a shard already filtered at least as strictly as ``options`` asks."""
    if not applied:
        return not (options.drop_finish_reasons or options.min_loss_tokens)
    return (set(options.drop_finish_reasons) <= set(applied.get("drop_finish_reasons", ()))
            and options.min_loss_tokens <= applied.get("min_loss_tokens", 0))
