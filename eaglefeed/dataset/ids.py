"""The record ids a dataset holds, as 16-byte digests: bounded memory, unaffected by compaction.

The index is global to the dataset rather than per input partition, so it stays right when
compaction merges segments of many partitions into one shard, and when an id arrives on a
different partition than before. It covers live files and the ``dropped/`` id files that
compaction filters write, so a filtered row that Kafka delivers again is not written again.
Memory: 16 bytes per id in a sorted numpy array, plus a set of the ids added since the last
merge (at most 1/16 of the array, and at least 65536 ids). Each sync parses only the manifest
lines appended since the last (:class:`~eaglefeed.dataset.manifest.ManifestReader`) and keeps
the live paths, so neither its cost nor its memory grows with the manifest's history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from eaglefeed.dataset.manifest import GC_LOCK, ManifestReader, locked

DIGEST = np.dtype("S16")


def digest(record_id: str) -> bytes:
    """The 16-byte digest the index keeps for ``record_id``."""
    return hashlib.blake2b(record_id.encode("utf-8"), digest_size=16).digest()


class IdIndex:
    """Digests of every id written to a dataset (by anyone, as of the last :meth:`sync`)."""

    def __init__(self, *, min_merge: int = 1 << 16) -> None:
        self._sorted = np.zeros(0, DIGEST)
        self._recent: set[bytes] = set()
        self._reader: ManifestReader | None = None
        self._live: set[str] = set()  # live files, as of the last sync
        self._dropped: set[str] = set()  # compaction's dropped-id files (kept for good)
        self._loaded: set[str] = set()  # those of them whose ids are in the index
        self._min_merge = min_merge

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    def sync(self, root: Path) -> int:
        """Add the ids of every file the manifest lists that this index has not read yet.

        One index follows one dataset: the first sync names it, and the manifest's lines are
        read from where the previous sync stopped.

        Returns:
            the number of ids read.
        """
        root = Path(root)
        if self._reader is None or self._reader.root != root:
            self._reader, self._live, self._dropped = ManifestReader(root), set(), set()
        read = 0
        with locked(root, GC_LOCK, shared=True):  # compaction may not delete what we read
            restarted, events = self._reader.read()
            if restarted:  # a new manifest: no id the old one listed is the dataset's any more
                self._live, self._dropped, self._loaded = set(), set(), set()
                self._sorted, self._recent = np.zeros(0, DIGEST), set()
            self._follow(events)
            wanted = self._live | self._dropped
            for rel in wanted - self._loaded:
                ids = pq.read_table(root / rel, columns=["id"]).column("id").to_pylist()
                self._recent.update(digest(i) for i in ids)
                self._maybe_merge()
                read += len(ids)
        self._loaded = wanted
        return read

    def _follow(self, events: list[dict[str, Any]]) -> None:
        """Apply manifest events to the sets of files whose ids are the dataset's (as ``live_segments``)."""
        for event in events:
            self._live.difference_update(event.get("removed", ()))
            self._live.update(seg["path"] for seg in event.get("added", ()))
            if event.get("dropped"):
                self._dropped.add(event["dropped"]["path"])

    def claim(self, ids: Sequence[str]) -> list[bool]:
        """Record ``ids`` as written; True for each id not seen before (a repeat within ``ids`` is False)."""
        digests = [digest(i) for i in ids]
        known = self._in_sorted(digests)
        fresh = []
        for d, old in zip(digests, known, strict=True):
            new = not old and d not in self._recent
            if new:
                self._recent.add(d)
            fresh.append(new)
        self._maybe_merge()
        return fresh

    def __contains__(self, record_id: str) -> bool:
        d = digest(record_id)
        return d in self._recent or bool(self._in_sorted([d])[0])

    def _in_sorted(self, digests: list[bytes]) -> np.ndarray:
        if not len(self._sorted) or not digests:
            return np.zeros(len(digests), bool)
        wanted = np.array(digests, DIGEST)
        pos = np.minimum(np.searchsorted(self._sorted, wanted), len(self._sorted) - 1)
        found: np.ndarray = self._sorted[pos] == wanted
        return found

    def _maybe_merge(self) -> None:
        if len(self._recent) >= max(self._min_merge, len(self._sorted) // 16):
            self._sorted = np.union1d(self._sorted, np.array(list(self._recent), DIGEST))
            self._recent.clear()
