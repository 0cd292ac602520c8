"""The dataset manifest: an append-only, fsynced JSON-lines log that says which files are the dataset.

A dataset directory holds ``manifest.jsonl``, ``segments/*.parquet`` (sink segments and
compacted shards), ``freq/*.npz`` (each file's loss-token counts, ``dataset.freq``) and
``dropped/*.parquet`` (ids that compaction filtered out). A file belongs
to the dataset only while the manifest lists it: readers list files from the manifest, never
from the directory. Every writer (sink processes, compaction) appends under one ``flock``.

Events (one JSON object per line, ``"v": 1``)::

    {"kind": "flush", "added": [SEG], "offsets": {"topic:p": [first, last]},
     "duplicates": n, "dead_lettered": n, "at": ms}
    {"kind": "compact", "added": [SEG], "removed": [path, ...],
     "dropped": {"path": ..., "rows": n, "reasons": {...}} | null, "at": ms}

where ``SEG`` is ``{"path", "rows", "bytes", "sha256", "schema_version", "tokens", "loss_tokens",
"data_bytes", "freq"}`` (shards add the ``filter`` they applied; ``freq`` names the file's
loss-token counts, absent in datasets written before them).
A flush without rows (all duplicates or dead letters) still records its offsets.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eaglefeed.errors import ManifestError

MANIFEST = "manifest.jsonl"
MANIFEST_VERSION = 1
WRITE_LOCK = ".lock"  # held while appending to the manifest
GC_LOCK = ".gc.lock"  # shared by readers; exclusive to delete files the manifest no longer lists
COMPACT_LOCK = ".compact.lock"  # one compaction at a time


def read_manifest(root: Path) -> list[dict[str, Any]]:
    """The manifest's events in order.

    A last line without its newline (an append cut short by a crash, or one being written
    right now) is not an event yet and is ignored.

    Raises:
        ManifestError: a complete line is not JSON.
    """
    path = Path(root) / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    events = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{path}:{number} is not a JSON event: {exc}") from exc
    return events


def append_manifest(root: Path, entry: dict[str, Any], *, expect_live: Iterable[str] = ()) -> None:
    """Append one event and fsync it: this is the dataset's commit point.

    Args:
        root: the dataset directory.
        entry: the event (``at`` and ``v`` are added).
        expect_live: paths that must still be live when the event is written (checked under
            the lock, so a compaction never removes a file someone else already removed).

    Raises:
        ManifestError: a path of ``expect_live`` is not live any more.
    """
    root = Path(root)
    line = json.dumps({**entry, "v": MANIFEST_VERSION, "at": int(time.time() * 1000)}, sort_keys=True)
    with locked(root, WRITE_LOCK):
        expect = set(expect_live)
        if expect:
            missing = expect - set(live_segments(read_manifest(root)))
            if missing:
                raise ManifestError(f"not live any more: {sorted(missing)}")
        with open(root / MANIFEST, "ab") as fh:
            _drop_torn_tail(fh)
            fh.write(line.encode("utf-8") + b"\n")
            fh.flush()
            os.fsync(fh.fileno())


def live_segments(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Replay the manifest: path → entry of every Parquet file currently in the dataset."""
    live: dict[str, dict[str, Any]] = {}
    for event in events:
        for path in event.get("removed", ()):
            live.pop(path, None)
        for seg in event.get("added", ()):
            live[seg["path"]] = seg
    return live


def ever_added(events: list[dict[str, Any]]) -> set[str]:
    """Every path the manifest ever listed (live or compacted away)."""
    return {seg["path"] for event in events for seg in event.get("added", ())}


def dropped_files(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``dropped`` entries of compactions: files of ids that filters removed."""
    return [event["dropped"] for event in events if event.get("dropped")]


def resume_offsets(events: list[dict[str, Any]]) -> dict[str, int]:
    """Per ``topic:partition``, the next offset to read (one past the highest written)."""
    nxt: dict[str, int] = {}
    for event in events:
        for key, (_first, last) in event.get("offsets", {}).items():
            nxt[key] = max(nxt.get(key, 0), last + 1)
    return nxt


@contextmanager
def locked(root: Path, name: str, *, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """Hold the ``flock`` ``root/name``; yields False (holding nothing) if ``wait`` is off and it is busy."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / name, "a") as lock:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(lock, mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _drop_torn_tail(fh: Any) -> None:
    """Cut a last line a crashed writer left without its newline (we hold the write lock)."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    with open(fh.name, "rb") as reader:
        reader.seek(size - 1)
        if reader.read(1) == b"\n":
            return
        reader.seek(0)
        keep = reader.read().rfind(b"\n") + 1
    fh.truncate(keep)
    fh.seek(keep)
