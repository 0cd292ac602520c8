"""Each trainer group's consumption record: ``DATASET/consumers/<group>/rank-<r>-of-<w>.npz``.

A rank writes its record when its stream starts (subscribing its group) and whenever its trainer
takes a position (``RowStream.state_dict``, the checkpoint), replacing the file atomically (temp
file, fsync, rename). A record holds the rank's position (epoch, ids delivered in it) and the
names of every hidden-state file whose row the rank consumed in any epoch. A group is
*subscribed* from its first record on: the workers' byte budget and keep-tokens deletion
(``eaglefeed.dataset.streaming.usage``) count a file as consumed only once every subscribed
group's records name it. Deleting a group's folder unsubscribes it.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.shards import fsync_dir
from eaglefeed.dataset.streaming.position import DIGEST, DigestSet, StreamPosition

CONSUMERS = "consumers"
"""The records' folder inside a dataset directory."""


def record_path(root: Path, position: StreamPosition) -> Path:
    """Where the rank of ``position`` keeps its record."""
    return (Path(root) / CONSUMERS / position.group /
            f"rank-{position.rank}-of-{position.world_size}.npz")


@dataclass
class Record:
    """A rank's record: its position and the state files of rows it consumed (any epoch)."""

    position: StreamPosition
    states: DigestSet


def write_record(root: Path, record: Record) -> None:
    """Replace the rank's record atomically (a reader sees the old one or the new one)."""
    path = record_path(root, record.position)
    path.parent.mkdir(parents=True, exist_ok=True)
    pos = record.position
    meta = {"group": pos.group, "rank": pos.rank, "world_size": pos.world_size, "epoch": pos.epoch}
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             delivered=pos.delivered.array(), states=record.states.array())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(buffer.getvalue())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_record(path: Path) -> Record:
    """The record in ``path``.

    Raises:
        DatasetError: the file is not a consumption record.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            delivered, states = data["delivered"].astype(DIGEST), data["states"].astype(DIGEST)
    except (OSError, ValueError, KeyError) as exc:
        raise DatasetError(f"{path} is not a consumption record: {exc}") from exc
    position = StreamPosition(group=meta["group"], rank=meta["rank"], world_size=meta["world_size"],
                              epoch=meta["epoch"], delivered=DigestSet.from_bytes(delivered.tobytes()))
    return Record(position=position, states=DigestSet.from_bytes(states.tobytes()))


class GroupRecords:
    """Every subscribed group's consumed state files (the union of its ranks'), re-read only when changed.

    Args:
        root: the dataset directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache: dict[Path, tuple[tuple[int, int, int], np.ndarray]] = {}

    def states(self) -> dict[str, np.ndarray]:
        """Group → the sorted digests of the state-file names its ranks consumed."""
        folder = self.root / CONSUMERS
        if not folder.is_dir():
            return {}
        groups: dict[str, np.ndarray] = {}
        seen: set[Path] = set()
        for group in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            arrays = []
            for path in sorted(group.glob("rank-*.npz")):
                seen.add(path)
                arrays.append(self._states_of(path))
            if arrays:
                groups[group.name] = np.unique(np.concatenate(arrays)) if len(arrays) > 1 else arrays[0]
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return groups

    def _states_of(self, path: Path) -> np.ndarray:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return np.zeros(0, DIGEST)
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a replaced record is a new inode
        cached = self._cache.get(path)
        if cached is None or cached[0] != key:
            try:
                states = read_record(path).states.array()
            except DatasetError:
                if not path.exists():  # the group's folder removed meanwhile (how a group unsubscribes)
                    return np.zeros(0, DIGEST)
                raise
            cached = (key, states)
            self._cache[path] = cached
        return cached[1]
