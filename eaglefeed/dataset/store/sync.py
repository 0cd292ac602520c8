"""Opening a mirror of a dataset in an object store and bringing it up to date with the store.

The store is the truth (``eaglefeed.dataset.store.mirror``): :func:`pull` adds the events the
store holds beyond the mirror, listing only the keys after the mirror's last one, and
:func:`fetch_live` downloads the live files the mirror lacks.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from eaglefeed.core.errors import ManifestError
from eaglefeed.dataset.manifest import (
    MANIFEST,
    WRITE_LOCK,
    dropped_files,
    live_segments,
    locked,
    read_manifest,
)
from eaglefeed.dataset.owner import OWNER_FILE
from eaglefeed.dataset.store.client import ObjectStore
from eaglefeed.dataset.store.mirror import EVENTS, REMOTE_FILE, Mirror, event_path, remember
from eaglefeed.dataset.store.uri import StoreURI

log = logging.getLogger(__name__)

_DATA_FOLDERS = ("segments", "freq", "dropped", "hidden_states")


def open_mirror(uri: StoreURI, root: Path, *, store: ObjectStore | None = None, fetch: bool = True) -> Mirror:
    """Make ``root`` the mirror of ``uri`` (checking the store can be reached) and pull what it lacks.

    With ``fetch`` False only the manifest's new events are pulled, not the live files they name.

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
    remember(mirror)
    pull(mirror)
    if fetch:
        fetch_live(mirror)
    return mirror


def pull(mirror: Mirror) -> int:
    """Add to the mirror the events the store holds beyond it; returns how many (files: :func:`fetch_live`).

    A store holding fewer events than the mirror, or another first event, holds another
    dataset now (the old one was deleted): the mirror is emptied and filled from the store.
    """
    with locked(mirror.root, WRITE_LOCK):
        path = mirror.root / MANIFEST
        local = path.read_bytes() if path.exists() else b""
        local = local[:local.rfind(b"\n") + 1]
        count = local.count(b"\n")
        if count and not _same_dataset(mirror, local, count):
            log.warning("%s holds another dataset than the mirror %s: starting the mirror again",
                        mirror.store.uri, mirror.root)
            _empty(mirror)
            local, count = b"", 0
        added = []
        for rel in mirror.store.paths(EVENTS, start_after=event_path(count) if count else None):
            data = mirror.store.get_bytes(rel)
            if data is None or not data.endswith(b"\n"):
                raise ManifestError(f"{mirror.store.uri}/{rel} is not a manifest event")
            added.append(data)
        if added:
            with open(path, "ab") as fh:
                fh.truncate(len(local))  # a line a crash left without its newline is not an event
                fh.seek(len(local))
                fh.write(b"".join(added))
                fh.flush()
                os.fsync(fh.fileno())
    return len(added)


def fetch_live(mirror: Mirror) -> int:
    """Download every file the manifest lists as live that the mirror lacks; returns how many."""
    events = read_manifest(mirror.root)
    live = live_segments(events).values()
    files = [rel for entry in live for rel in (entry["path"], entry.get("freq")) if rel]
    files += [d["path"] for d in dropped_files(events)]
    missing = [rel for rel in files if not (mirror.root / rel).exists()]
    for rel in missing:
        mirror.fetch(rel)
    return len(missing)


def _same_dataset(mirror: Mirror, local: bytes, count: int) -> bool:
    """Whether the store's event ``count`` is the mirror's last line (else it was begun again)."""
    remote = mirror.store.get_bytes(event_path(count))
    last = local[local.rfind(b"\n", 0, len(local) - 1) + 1:]
    return remote == last


def _empty(mirror: Mirror) -> None:
    for name in (MANIFEST, OWNER_FILE):
        (mirror.root / name).unlink(missing_ok=True)
    for folder in _DATA_FOLDERS:
        shutil.rmtree(mirror.root / folder, ignore_errors=True)
