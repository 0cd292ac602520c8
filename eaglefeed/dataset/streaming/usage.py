"""What the hidden-state store holds and what trainers consumed: the workers' budget, ``status``, deletion.

*Stored* is every file in ``DATASET/hidden_states/`` (partial ``*.tmp`` ones included: they take
the disk too). *Consumed* is the part of it whose rows every subscribed trainer group consumed
(``eaglefeed.dataset.streaming.record``); with no group subscribed nothing is. The budget bounds
stored minus consumed, so it frees room both when trainers consume and when files are deleted
(keep-tokens streaming, ``eaglefeed gc``, by hand).

In a dataset whose home is an object store, the store is measured (a listing of its
``hidden_states/``: the mirrors' copies are caches) and the records are read from it, so a
worker on a GPU host counts what trainers on any host consumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from eaglefeed.dataset.hidden_states import STORE
from eaglefeed.dataset.streaming.position import DIGEST, digest
from eaglefeed.dataset.streaming.record import GroupRecords

if TYPE_CHECKING:
    from eaglefeed.dataset.store import ObjectStore


@dataclass(frozen=True)
class StatesUsage:
    """One measurement of the store.

    Attributes:
        stored_bytes: bytes of the files in the store.
        stored_files: how many files.
        consumed_bytes: bytes of those files whose rows every subscribed group consumed.
        consumed_files: how many files.
        groups: the subscribed trainer groups.
    """

    stored_bytes: int = 0
    stored_files: int = 0
    consumed_bytes: int = 0
    consumed_files: int = 0
    groups: tuple[str, ...] = ()

    @property
    def unconsumed_bytes(self) -> int:
        """Stored and not yet consumed by every group: what ``--hidden-states-budget`` bounds."""
        return self.stored_bytes - self.consumed_bytes


class StatesMeter:
    """Measures a dataset's store again and again, keeping the digests of names it saw (cheap repeats).

    Args:
        root: the dataset directory (with ``store``: its mirror, whose copies of deleted files go
            too; None: no mirror).
        store: the dataset's object store, when its home is one: what is measured.
    """

    def __init__(self, root: Path | None, *, store: ObjectStore | None = None) -> None:
        if root is None and store is None:
            raise ValueError("a StatesMeter measures a directory or a store")
        self.root = None if root is None else Path(root)
        self.store = store
        self.records = GroupRecords(self.root, store=store)
        self._digests: dict[str, bytes] = {}

    def measure(self) -> StatesUsage:
        """Stored and consumed bytes now."""
        names, sizes = self._listing()
        groups = self.records.states()
        consumed = self._consumed(names, groups)
        return StatesUsage(stored_bytes=int(sizes.sum()), stored_files=len(names),
                           consumed_bytes=int(sizes[consumed].sum()), consumed_files=int(consumed.sum()),
                           groups=tuple(groups))

    def consumed_files(self) -> list[tuple[str, int]]:
        """The names and sizes of the store's files whose rows every subscribed group consumed."""
        names, sizes = self._listing()
        consumed = self._consumed(names, self.records.states())
        return [(name, int(size)) for name, size, done in zip(names, sizes, consumed, strict=True) if done]

    def delete(self, name: str) -> bool:
        """Delete the state file ``name`` (from the store and the mirror, or the directory); False if gone."""
        if self.store is not None:
            self.store.delete(f"{STORE}/{name}")
            if self.root is not None:
                (self.root / STORE / name).unlink(missing_ok=True)
            return True
        assert self.root is not None
        try:
            (self.root / STORE / name).unlink()
        except FileNotFoundError:
            return False  # another rank deleted it first
        return True

    def _listing(self) -> tuple[list[str], np.ndarray]:
        names, sizes = [], []
        if self.store is not None:
            for obj in self.store.listing(STORE):
                names.append(obj.rel.rpartition("/")[2])
                sizes.append(obj.size)
        else:
            assert self.root is not None
            try:
                entries = list(os.scandir(self.root / STORE))
            except FileNotFoundError:
                entries = []
            for entry in entries:
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue  # renamed or deleted meanwhile
                names.append(entry.name)
                sizes.append(size)
        live = set(names)
        if len(self._digests) > 2 * len(live) + 1024:  # forget deleted files
            self._digests = {n: d for n, d in self._digests.items() if n in live}
        return names, np.array(sizes, np.int64)

    def _consumed(self, names: list[str], groups: dict[str, np.ndarray]) -> np.ndarray:
        if not groups or not names:
            return np.zeros(len(names), bool)
        digests = np.array([self._digest(name) for name in names], DIGEST)
        consumed = np.ones(len(names), bool)
        for states in groups.values():
            consumed &= np.isin(digests, states)
        return consumed

    def _digest(self, name: str) -> bytes:
        found = self._digests.get(name)
        if found is None:
            found = self._digests[name] = digest(name)
        return found


def measure(root: Path | None, *, store: ObjectStore | None = None) -> StatesUsage:
    """The states of the dataset ``root`` (or in ``store``): bytes stored, and consumed by every group."""
    return StatesMeter(root, store=store).measure()


def delete_consumed(root: Path | None, meter: StatesMeter | None = None) -> tuple[int, int]:
    """Delete the state files every subscribed group consumed (keep-tokens mode); (files, bytes) deleted.

    ``meter`` (one kept between calls, or one of a store) measures; else the directory ``root``.
    The rows stay: their ``hidden_states`` then names a file that is gone.
    """
    meter = meter or StatesMeter(root)
    deleted = freed = 0
    for name, size in meter.consumed_files():
        if meter.delete(name):
            deleted, freed = deleted + 1, freed + size
    return deleted, freed


def human_bytes(count: int) -> str:
    """Bytes as a short decimal size (``1.2 GB``), for log lines and ``status``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
