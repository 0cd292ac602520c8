"""A dataset whose home is an object store, worked on through a local mirror directory.

Every part of eaglefeed that reads or writes a dataset works on a directory; for ``s3://...``
that directory is a mirror (in the cache dir) and the store is the truth:

- **the commit point is a put.** The manifest's events are objects ``manifest/<seq>.json``
  (``seq`` from 1, twelve digits, so key order is commit order). An append uploads the files the
  event adds, then puts the event (conditionally, ``If-None-Match: *``, so a store that honours
  it refuses a second writer of the same number), and only then appends the line to the
  mirror's ``manifest.jsonl``. A writer killed between the two leaves an event the mirror lacks,
  which the next pull adds (``eaglefeed.dataset.store.sync``); a file uploaded without its event
  is not in the dataset (readers list files from the manifest), and compaction's garbage
  collection deletes such shards from the store as from a directory.
- **one writing host per dataset.** Appends are serialized by the mirror's lock, as on a local
  dataset, so any number of sinks and compactions on one host share a remote dataset exactly
  once. Writers on two hosts are told apart only by a store that honours conditional puts
  (s3proxy's filesystem backend does not: docs/DATASET.md).
- **readers read what is new.** A pull lists only the event keys after the last one the mirror
  holds, then fetches the live files the mirror lacks.

``remote.json`` in the mirror names its store; :func:`mirror_of` finds it for the manifest code,
and ``eaglefeed.dataset.store.sync`` opens and pulls mirrors.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ManifestError
from eaglefeed.dataset.store.client import ConditionFailedError, ObjectStore
from eaglefeed.dataset.store.uri import parse

log = logging.getLogger(__name__)

REMOTE_FILE = "remote.json"
"""In a mirror directory: the store whose dataset it mirrors."""
EVENTS = "manifest"
"""The store's folder of manifest events, one object each."""
_MIRRORS: dict[Path, Mirror | None] = {}
_MIRRORS_LOCK = threading.Lock()


def event_path(seq: int) -> str:
    """The dataset path of manifest event ``seq`` (1-based)."""
    return f"{EVENTS}/{seq:012d}.json"


def event_files(entry: dict[str, Any]) -> list[str]:
    """The dataset files an event adds (segments, their loss-token counts, dropped ids)."""
    files = []
    for seg in entry.get("added", ()):
        files.append(seg["path"])
        if seg.get("freq"):
            files.append(seg["freq"])
    if entry.get("dropped"):
        files.append(entry["dropped"]["path"])
    return files


class Mirror:
    """The local mirror ``root`` of the dataset at ``store``.

    Args:
        root: the mirror directory.
        store: the dataset's home.
    """

    def __init__(self, root: Path, store: ObjectStore) -> None:
        self.root = Path(root)
        self.store = store

    def publish(self, seq: int, line: bytes, entry: dict[str, Any]) -> None:
        """Commit one event in the store: upload its files, then put the event (the caller holds the lock).

        Args:
            seq: the event's number (the mirror manifest's line count + 1).
            line: the event's JSON line as the mirror's manifest will hold it (no newline).
            entry: the event.

        Raises:
            ManifestError: another writer already committed this event number.
        """
        ahead = next(iter(self.store.paths(EVENTS, start_after=event_path(seq - 1) if seq > 1 else None)),
                     None)
        if ahead is not None:  # a writer of this host was killed after its put, before its local line
            raise ManifestError(f"{self.store.uri} holds {ahead}, which this host's mirror {self.root} "
                                "has not read (a writer killed after its commit): nothing was written; "
                                "start again to read it first")
        for rel in event_files(entry):
            self.store.put_file(rel, self.root / rel)
        try:
            self.store.put_bytes(event_path(seq), line + b"\n", if_absent=True)
        except ConditionFailedError:
            if self.store.get_bytes(event_path(seq)) == line + b"\n":
                return  # our own put, retried after its answer was lost: it is committed
            raise ManifestError(f"{self.store.uri}: event {seq} was committed by another writer; a "
                                "dataset in an object store has one writing host") from None

    def fetch(self, rel: str) -> Path:
        """The mirror's copy of the dataset file ``rel``, downloaded when it is not there yet.

        Raises:
            ManifestError: the store has no such file.
        """
        local = self.root / rel
        if not local.exists() and not self.store.download(rel, local):
            raise ManifestError(f"{self.store.uri}/{rel} is listed by the manifest but not in the store")
        return local

    def delete(self, rel: str) -> None:
        """Delete the dataset file ``rel`` from the store (the mirror's copy is the caller's)."""
        self.store.delete(rel)


def mirror_of(root: Path) -> Mirror | None:
    """The :class:`Mirror` whose directory is ``root``, or None for a local dataset (cached per process)."""
    root = Path(root)
    with _MIRRORS_LOCK:
        if root not in _MIRRORS:
            _MIRRORS[root] = _read_mirror(root)
        return _MIRRORS[root]


def remember(mirror: Mirror) -> None:
    """Make ``mirror`` the one :func:`mirror_of` gives for its directory."""
    with _MIRRORS_LOCK:
        _MIRRORS[mirror.root] = mirror


def _read_mirror(root: Path) -> Mirror | None:
    try:
        named = json.loads((root / REMOTE_FILE).read_text(encoding="utf-8"))["uri"]
    except (FileNotFoundError, NotADirectoryError):  # a local dataset (or no dataset at all)
        return None
    return Mirror(root, ObjectStore(parse(named)))
