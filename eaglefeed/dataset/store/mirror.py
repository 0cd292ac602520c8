"""A dataset whose home is an object store, worked on through a local mirror directory.

Every part of eaglefeed that reads or writes a dataset works on a directory; for ``s3://...``
that directory is a mirror (in the cache dir) and the store is the truth:

- **the commit point is a put.** The manifest's events are objects ``manifest/<seq>.json``
  (``seq`` from 1, twelve digits, so key order is commit order). An append uploads the files the
  event adds, then puts the event (conditionally, ``If-None-Match: *``, so a store that honours
  it refuses a second writer of the same number), and only then appends the line to the
  mirror's ``manifest.jsonl``. A writer killed between the two leaves an event the mirror lacks,
  which the next :meth:`Mirror.pull` adds; a file uploaded without its event is an orphan that
  ``eaglefeed gc`` collects, never a row.
- **one writing host per dataset.** Appends are serialized by the mirror's lock, as on a local
  dataset, so any number of sinks and compactions on one host share a remote dataset exactly
  once. Writers on two hosts are told apart only by a store that honours conditional puts
  (s3proxy's filesystem backend does not: docs/DATASET.md).
- **readers read what is new.** :meth:`Mirror.pull` lists only the event keys after the last
  one the mirror holds, and fetches the files an event lists when they are missing locally.

``remote.json`` in the mirror names its store; :func:`mirror_of` finds it for the manifest code.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ManifestError
from eaglefeed.dataset.store.client import ConditionFailedError, ObjectStore
from eaglefeed.dataset.store.uri import StoreURI

log = logging.getLogger(__name__)

REMOTE_FILE = "remote.json"
"""In a mirror directory: the store whose dataset it mirrors."""
EVENTS = "manifest"
"""The store's folder of manifest events, one object each."""
_DATA_FOLDERS = ("segments", "freq", "dropped", "hidden_states")
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
        self._lines: tuple[int, int] | None = None  # (manifest size, its line count), as last seen

    def publish(self, line: bytes, entry: dict[str, Any], *, size: int) -> None:
        """Commit one event in the store: upload its files, then put the event (the caller holds the lock).

        Args:
            line: the event's JSON line as the mirror's manifest will hold it (no newline).
            entry: the event.
            size: the mirror manifest's size now, before ``line`` is appended.

        Raises:
            ManifestError: another writer already committed this event number.
        """
        seq = self._count(size) + 1
        for rel in event_files(entry):
            self.store.put_file(rel, self.root / rel)
        try:
            self.store.put_bytes(event_path(seq), line + b"\n", if_absent=True)
        except ConditionFailedError:
            raise ManifestError(f"{self.store.uri}: event {seq} was committed by another writer; a "
                                "dataset in an object store has one writing host") from None
        self._lines = (size + len(line) + 1, seq)

    def pull(self) -> int:
        """Add to the mirror the events the store holds beyond it; returns how many (see :meth:`fetch_live`).

        A store holding fewer events than the mirror, or another first event, holds another
        dataset now (the old one was deleted): the mirror is emptied and filled from the store.
        """
        from eaglefeed.dataset.manifest import MANIFEST, WRITE_LOCK, locked

        with locked(self.root, WRITE_LOCK):
            path = self.root / MANIFEST
            local = path.read_bytes() if path.exists() else b""
            local = local[:local.rfind(b"\n") + 1]
            count = local.count(b"\n")
            if count and not self._same_dataset(local, count):
                log.warning("%s holds another dataset than the mirror %s: starting the mirror again",
                            self.store.uri, self.root)
                self._empty()
                local, count = b"", 0
            added = []
            for rel in self.store.paths(EVENTS, start_after=event_path(count) if count else None):
                data = self.store.get_bytes(rel)
                if data is None or not data.endswith(b"\n"):
                    raise ManifestError(f"{self.store.uri}/{rel} is not a manifest event")
                added.append(data)
            if added:
                with open(path, "ab") as fh:
                    fh.write(b"".join(added))
                    fh.flush()
                    os.fsync(fh.fileno())
            self._lines = None
        return len(added)

    def fetch_live(self) -> int:
        """Download every file the manifest lists as live that the mirror lacks; returns how many."""
        from eaglefeed.dataset.manifest import dropped_files, live_segments, read_manifest

        events = read_manifest(self.root)
        wanted = [entry for entry in live_segments(events).values()]
        files = [rel for entry in wanted for rel in (entry["path"], entry.get("freq")) if rel]
        files += [d["path"] for d in dropped_files(events)]
        missing = [rel for rel in files if not (self.root / rel).exists()]
        for rel in missing:
            self.fetch(rel)
        return len(missing)

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

    def _count(self, size: int) -> int:
        if self._lines is not None and self._lines[0] == size:
            return self._lines[1]
        from eaglefeed.dataset.manifest import MANIFEST

        path = self.root / MANIFEST
        count = path.read_bytes().count(b"\n") if path.exists() else 0
        self._lines = (size, count)
        return count

    def _same_dataset(self, local: bytes, count: int) -> bool:
        """Whether the store's event ``count`` is the mirror's last line (else it was begun again)."""
        remote = self.store.get_bytes(event_path(count))
        last = local[local.rfind(b"\n", 0, len(local) - 1) + 1:]
        return remote == last

    def _empty(self) -> None:
        from eaglefeed.dataset.manifest import MANIFEST
        from eaglefeed.dataset.owner import OWNER_FILE

        for name in (MANIFEST, OWNER_FILE):
            (self.root / name).unlink(missing_ok=True)
        for folder in _DATA_FOLDERS:
            shutil.rmtree(self.root / folder, ignore_errors=True)


def mirror_of(root: Path) -> Mirror | None:
    """The :class:`Mirror` whose directory is ``root``, or None for a local dataset (cached per process)."""
    root = Path(root)
    with _MIRRORS_LOCK:
        if root not in _MIRRORS:
            _MIRRORS[root] = _read_mirror(root)
        return _MIRRORS[root]


def open_mirror(uri: StoreURI, root: Path, *, store: ObjectStore | None = None) -> Mirror:
    """Make ``root`` the mirror of ``uri`` (checking the store can be reached) and pull what it lacks.

    Raises:
        StoreError: the store cannot be reached or refuses the credentials.
        ManifestError: ``root`` mirrors another store already.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / REMOTE_FILE
    if marker.exists():
        named = json.loads(marker.read_text(encoding="utf-8")).get("uri")
        if named != str(uri):
            raise ManifestError(f"{root} mirrors {named}, not {uri}")
    store = store or ObjectStore(uri)
    store.ensure_bucket()
    if not marker.exists():
        tmp = marker.with_name(f".{REMOTE_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps({"uri": str(uri)}) + "\n", encoding="utf-8")
        tmp.replace(marker)
    mirror = Mirror(root, store)
    with _MIRRORS_LOCK:
        _MIRRORS[root] = mirror
    mirror.pull()
    mirror.fetch_live()
    return mirror


def _read_mirror(root: Path) -> Mirror | None:
    from eaglefeed.dataset.store.uri import parse

    try:
        named = json.loads((root / REMOTE_FILE).read_text(encoding="utf-8"))["uri"]
    except FileNotFoundError:
        return None
    return Mirror(root, ObjectStore(parse(named)))
