"""Each trainer group's consumption record: ``DATASET/consumers/<group>/rank-<r>-of-<w>.npz``.

A rank writes its record when its stream starts (subscribing its group) and whenever its trainer
takes a position (``RowStream.state_dict``, the checkpoint), replacing the file atomically (temp
file, fsync, rename). A record holds the rank's position (epoch, ids delivered in it) and the
names of every hidden-state file whose row the rank consumed in any epoch. A group is
*subscribed* from its first record on: the workers' byte budget and keep-tokens deletion
(``eaglefeed.dataset.streaming.usage``) count a file as consumed only once every subscribed
group's records name it. Deleting a group's folder unsubscribes it.

In a dataset whose home is an object store the records are objects of the store at the same
paths (:func:`write_store_record`, ``GroupRecords(store=...)``), so the workers and ranks of any
host count them.
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.shards import fsync_dir
from eaglefeed.dataset.streaming.position import DIGEST, DigestSet, StreamPosition

if TYPE_CHECKING:
    from eaglefeed.dataset.store import ObjectStore

log = logging.getLogger(__name__)

CONSUMERS = "consumers"
"""The records' folder inside a dataset directory."""


def record_rel(position: StreamPosition) -> str:
    """The rank of ``position``'s record, as a path in the dataset."""
    return f"{CONSUMERS}/{position.group}/rank-{position.rank}-of-{position.world_size}.npz"


def record_path(root: Path, position: StreamPosition) -> Path:
    """Where the rank of ``position`` keeps its record."""
    return Path(root) / record_rel(position)


@dataclass
class Record:
    """A rank's record: its position and the state files of rows it consumed (any epoch)."""

    position: StreamPosition
    states: DigestSet


def write_record(root: Path, record: Record) -> None:
    """Replace the rank's record atomically (a reader sees the old one or the new one)."""
    path = record_path(root, record.position)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(record_bytes(record))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def record_bytes(record: Record) -> bytes:
    """The record as the bytes of its file (an ``.npz``)."""
    pos = record.position
    meta = {"group": pos.group, "rank": pos.rank, "world_size": pos.world_size, "epoch": pos.epoch}
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             delivered=pos.delivered.array(), states=record.states.array())
    return buffer.getvalue()


def read_record(path: Path) -> Record:
    """The record in ``path``.

    Raises:
        DatasetError: the file is not a consumption record.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path} is not a consumption record: {exc}") from exc
    return parse_record(data, str(path))


def parse_record(data: bytes, where: str) -> Record:
    """The record whose file holds ``data`` (``where`` names it in an error).

    Raises:
        DatasetError: the bytes are not a consumption record.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            meta = json.loads(bytes(arrays["meta"]).decode())
            delivered, states = arrays["delivered"].astype(DIGEST), arrays["states"].astype(DIGEST)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"{where} is not a consumption record: {exc}") from exc
    position = StreamPosition(group=meta["group"], rank=meta["rank"], world_size=meta["world_size"],
                              epoch=meta["epoch"], delivered=DigestSet.from_bytes(delivered.tobytes()))
    return Record(position=position, states=DigestSet.from_bytes(states.tobytes()))


class GroupRecords:
    """Every subscribed group's consumed state files (the union of its ranks'), re-read only when changed.

    Args:
        root: the dataset directory (None with ``store``).
        store: the dataset's object store, when its home is one: the records are read from there.
    """

    def __init__(self, root: Path | None, *, store: ObjectStore | None = None) -> None:
        self.root = None if root is None else Path(root)
        self.store = store
        self._cache: dict[str, tuple[object, np.ndarray]] = {}
        self._unreadable: dict[str, tuple[object, int]] = {}  # record → (its version, failed reads of it)

    def states(self) -> dict[str, np.ndarray]:
        """Group → the sorted digests of the state-file names its ranks consumed."""
        by_group: dict[str, list[np.ndarray]] = {}
        seen: set[str] = set()
        for group, rel, version in self._records():
            seen.add(rel)
            by_group.setdefault(group, []).append(self._states_of(rel, version))
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return {group: np.unique(np.concatenate(arrays)) if len(arrays) > 1 else arrays[0]
                for group, arrays in sorted(by_group.items())}

    def _records(self) -> list[tuple[str, str, object]]:
        """(group, path in the dataset, what changes when the record is replaced) of every record."""
        found: list[tuple[str, str, object]] = []
        if self.store is not None:
            for obj in self.store.listing(CONSUMERS):
                parts = obj.rel.split("/")
                if len(parts) == 3 and parts[2].startswith("rank-") and parts[2].endswith(".npz"):
                    found.append((parts[1], obj.rel, (obj.etag, obj.size, obj.modified)))
            return found
        assert self.root is not None
        folder = self.root / CONSUMERS
        if not folder.is_dir():
            return []
        for group in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for path in sorted(group.glob("rank-*.npz")):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue  # the group's folder removed meanwhile (how a group unsubscribes)
                rel = f"{CONSUMERS}/{group.name}/{path.name}"
                found.append((group.name, rel, (stat.st_ino, stat.st_mtime_ns, stat.st_size)))
        return found

    def _states_of(self, rel: str, version: object) -> np.ndarray:
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == version:  # a replaced record is a new inode / ETag
            return cached[1]
        if self.store is not None:
            data = self.store.get_bytes(rel)
        else:
            assert self.root is not None
            try:
                data = (self.root / rel).read_bytes()
            except FileNotFoundError:
                data = None
        if data is None:  # removed since it was listed (how a group unsubscribes)
            return np.zeros(0, DIGEST)
        try:
            states = parse_record(data, rel).states.array()
        except DatasetError as exc:
            # Read while being replaced (a store whose overwrite readers can see half of, as
            # s3proxy's filesystem backend) or damaged: what it held before still counts, and it
            # is read again next time; a record that stays unreadable is said once, never raised
            # (a worker measuring the budget must not stop over a trainer's file).
            seen = self._unreadable.get(rel)
            self._unreadable[rel] = (version, (seen[1] + 1) if seen and seen[0] == version else 1)
            if self._unreadable[rel][1] == 2:
                log.warning("%s; counting what it held before until it can be read", exc)
            return cached[1] if cached is not None else np.zeros(0, DIGEST)
        self._unreadable.pop(rel, None)
        self._cache[rel] = (version, states)
        return states


def read_store_record(store: ObjectStore, position: StreamPosition) -> Record | None:
    """The record the store holds for the rank of ``position`` (None if it has none yet)."""
    rel = record_rel(position)
    data = store.get_bytes(rel)
    return None if data is None else parse_record(data, f"{store.uri}/{rel}")


def write_store_record(store: ObjectStore, record: Record) -> None:
    """Replace the rank's record in the store (a put is atomic: a reader sees the old one or the new one)."""
    store.put_bytes(record_rel(record.position), record_bytes(record))
