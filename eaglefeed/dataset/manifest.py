"""The dataset manifest: an append-only, fsynced JSON-lines log that says which files are the dataset.

A dataset directory holds ``manifest.jsonl``, ``segments/*.parquet`` (sink segments and
compacted shards), ``freq/*.npz`` (each file's loss-token counts, ``eaglefeed.dataset.freq``) and
``dropped/*.parquet`` (ids that compaction filtered out). A file belongs
to the dataset only while the manifest lists it: readers list files from the manifest, never
from the directory. Every writer (sink processes, compaction) appends under one ``flock``.

Events (one JSON object per line, ``"v": 1``)::

    {"kind": "flush", "added": [SEG], "offsets": {"topic:p": [first, last]},
     "duplicates": n, "dead_lettered": n, "at": ms}
    {"kind": "compact", "added": [SEG], "removed": [path, ...],
     "dropped": {"path": ..., "rows": n, "reasons": {...}} | null, "at": ms}
    {"kind": "claim", "claims": {"topic:p": token}, "generation": n, "at": ms}
    {"kind": "capture", "added": [SEG], "removed": [path], "at": ms}

(``capture``: ``eaglefeed capture`` replaced a file by a copy whose rows reference their hidden
states, ``eaglefeed.dataset.state_fill``.)

where ``SEG`` is ``{"path", "rows", "bytes", "sha256", "schema_version", "tokens", "loss_tokens",
"data_bytes", "freq"}`` (shards add the ``filter`` they applied; ``freq`` names the file's
loss-token counts, absent in datasets written before them).
A flush without rows (all duplicates or dead letters) still records its offsets.

A sink that is assigned a partition first appends a ``claim`` of it (a token unique to that
assignment); a flush it appends later carries that token as its fence and is refused, under the
write lock, once a newer claim of the partition is in the manifest (:class:`ManifestTail`), so
a sink that lost a partition without knowing it can never write behind its next owner.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ManifestError
from eaglefeed.dataset.store.mirror import mirror_of

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
    with locked(root, WRITE_LOCK):
        expect = set(expect_live)
        if expect:
            missing = expect - set(live_segments(read_manifest(root)))
            if missing:
                raise ManifestError(f"not live any more: {sorted(missing)}")
        _append_line(root, entry)


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


class ManifestReader:
    """The manifest's events appended since the last :meth:`read`: each call parses only new lines.

    What a long-running reader (a sink's id index, its fence) needs so that its cost and its
    memory follow what changed, not the dataset's size. A manifest replaced by a new file (a
    dataset deleted and started again) is read from its start, and :meth:`read` says so.

    Args:
        root: the dataset directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.offset = 0  # bytes of complete lines parsed
        self._inode: int | None = None

    def read(self) -> tuple[bool, list[dict[str, Any]]]:
        """The events appended since the last call, and whether the manifest started over.

        Returns:
            ``(restarted, events)``: ``restarted`` is True when the file is not the one read
            before (its earlier events are to be forgotten); ``events`` are complete lines only.

        Raises:
            ManifestError: a complete line is not JSON.
        """
        try:
            fh = open(self.root / MANIFEST, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:  # not begun yet, or (when read before) deleted: its events are gone
            restarted, self._inode, self.offset = self._inode is not None, None, 0
            return restarted, []
        with fh:
            stat = os.fstat(fh.fileno())
            restarted = self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self.offset)
            if restarted or self._inode is None:
                self._inode, self.offset = stat.st_ino, 0
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a last line without its newline is not an event yet
        events = []
        for line in data[:end].split(b"\n")[:-1]:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{self.root / MANIFEST} at byte {self.offset} is not a JSON event: "
                                    f"{exc}") from exc
            self.offset += len(line) + 1
        return restarted, events


class ManifestTail:
    """The sink's view of the manifest, read incrementally.

    Each :meth:`refresh` parses only the lines appended since the last one, so its cost follows
    what changed, not the dataset's size. It holds, per ``topic:partition``, the resume offset
    and the latest claim, and every path the manifest ever listed. Thread-safe; appends go
    through it to be fenced.

    Args:
        root: the dataset directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._mutex = threading.RLock()
        self._reader = ManifestReader(self.root)
        self.resume: dict[str, int] = {}
        self.claims: dict[str, str] = {}
        self.added: set[str] = set()
        self.events = 0

    def refresh(self) -> int:
        """Parse the events appended since the last call; returns how many.

        Raises:
            ManifestError: a complete line is not JSON, or the manifest started over.
        """
        with self._mutex:
            restarted, events = self._reader.read()
            if restarted:
                # The dataset was deleted (or its store begun again) under a running writer: going
                # on would write a dataset missing every row written before. A restart rebuilds it.
                raise ManifestError(f"{self.root / MANIFEST} started over while this process wrote to "
                                    "it (the dataset was deleted or replaced): restart to rebuild it from "
                                    "the topic")
            for event in events:
                self._apply(event)
            return len(events)

    def resume_offset(self, key: str) -> int | None:
        """The next offset to read of ``topic:partition`` ``key``, as of the last refresh."""
        with self._mutex:
            return self.resume.get(key)

    def claim(self, keys: Iterable[str], token: str, **detail: Any) -> None:
        """Append a claim of ``keys`` by ``token`` (under the write lock) and read up to it.

        Every flush appended before the claim is then in :attr:`resume`; every flush of those
        partitions fenced by an older claim is refused from now on.
        """
        keys = sorted(keys)
        if not keys:
            return
        with self._mutex, locked(self.root, WRITE_LOCK):
            _append_line(self.root, {"kind": "claim", "claims": dict.fromkeys(keys, token), **detail})
            self.refresh()

    def superseded(self, fence: Mapping[str, str]) -> bool:
        """True if a partition of ``fence`` is claimed by another token now (a fresh read)."""
        with self._mutex:
            self.refresh()
            return any(self.claims.get(key, token) != token for key, token in fence.items())

    def append(self, entry: dict[str, Any], *, fence: Mapping[str, str] | None = None,
               before: Callable[[], None] | None = None) -> bool:
        """Append ``entry`` unless a partition of ``fence`` is claimed by another token now.

        Args:
            entry: the event.
            fence: ``topic:partition`` → the claim the writer holds; checked under the write lock.
            before: run under the lock once the fence passed, before the event is written
                (renames the event's files into place).

        Returns:
            False if the event was fenced off (nothing written, ``before`` not run).
        """
        with self._mutex, locked(self.root, WRITE_LOCK):
            self.refresh()
            if fence and any(self.claims.get(key, token) != token for key, token in fence.items()):
                return False
            if before is not None:
                before()
            _append_line(self.root, entry)
            return True

    def _apply(self, event: dict[str, Any]) -> None:
        self.events += 1
        for key, (_first, last) in event.get("offsets", {}).items():
            self.resume[key] = max(self.resume.get(key, 0), last + 1)
        for seg in event.get("added", ()):
            self.added.add(seg["path"])
        self.claims.update(event.get("claims", {}))


def _append_line(root: Path, entry: dict[str, Any]) -> None:
    """Write one event and fsync it (the caller holds the write lock)."""
    line = json.dumps({**entry, "v": MANIFEST_VERSION, "at": int(time.time() * 1000)}, sort_keys=True)
    with open(root / MANIFEST, "ab") as fh:
        size = _drop_torn_tail(fh)
        remote = mirror_of(root)
        if remote is not None:  # a dataset in an object store: the store's put is the commit point
            remote.publish(_line_count(root, size) + 1, line.encode("utf-8"), entry)
            _LINES[Path(root)] = (size + len(line) + 1, _LINES[Path(root)][1] + 1)
        fh.write(line.encode("utf-8") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


_LINES: dict[Path, tuple[int, int]] = {}
"""Per mirrored dataset: its manifest's size and line count as last seen (event numbers)."""


def _line_count(root: Path, size: int) -> int:
    """The manifest's complete lines when it is ``size`` bytes long (counted again only if it changed)."""
    seen = _LINES.get(Path(root))
    if seen is None or seen[0] != size:
        with open(Path(root) / MANIFEST, "rb") as fh:
            seen = (size, fh.read(size).count(b"\n"))
        _LINES[Path(root)] = seen
    return seen[1]


def _drop_torn_tail(fh: Any) -> int:
    """Cut a last line a crashed writer left without its newline (we hold the write lock); the size left."""
    size = int(fh.seek(0, os.SEEK_END))
    if size == 0:
        return 0
    with open(fh.name, "rb") as reader:
        reader.seek(size - 1)
        if reader.read(1) == b"\n":
            return size
        reader.seek(0)
        keep = reader.read().rfind(b"\n") + 1
    fh.truncate(keep)
    fh.seek(keep)
    return keep
