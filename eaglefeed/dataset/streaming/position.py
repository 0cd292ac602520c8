"""A stream position: which rank a row belongs to, and which rows one rank has delivered this epoch.

A row is identified by its ``id`` (the sink writes each id once), never by the file or the place
in a file that holds it: compaction moves rows into shards and ``capture`` into copies, so a
position that named files would not survive them. A rank's position is the epoch and the set of
ids it delivered in it, as 8-byte digests (a collision, about 1 in 10^7 for a million rows, would
skip one row). Which rank a row goes to is a function of its id and the world size alone
(:func:`shard_of`), so the ranks of a group split every row between them whatever the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DIGEST = np.dtype("S8")
STATE_VERSION = 1


def digest(text: str) -> bytes:
    """The 8-byte digest a position keeps of a row id (or a record of a state file's name)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def shard_of(row_id: str, world_size: int) -> int:
    """The rank (of ``world_size``) that receives the row ``row_id``."""
    return int.from_bytes(hashlib.blake2b(row_id.encode("utf-8"), digest_size=8, person=b"eaglefeed-rank")
                          .digest(), "little") % world_size


class DigestSet:
    """A set of 8-byte digests: a sorted array plus the ones added since the last merge (bounded memory)."""

    def __init__(self, digests: Iterable[bytes] = ()) -> None:
        self._sorted = np.unique(np.array(list(digests), DIGEST))
        self._recent: set[bytes] = set()

    @classmethod
    def from_bytes(cls, raw: bytes) -> DigestSet:
        """The set whose :meth:`to_bytes` is ``raw``."""
        made = cls()
        made._sorted = np.unique(np.frombuffer(raw, DIGEST))
        return made

    def to_bytes(self) -> bytes:
        """Every digest, sorted, concatenated."""
        return self.array().tobytes()

    def array(self) -> np.ndarray:
        """Every digest as a sorted ``S8`` array (merging what was added)."""
        if self._recent:
            self._sorted = np.union1d(self._sorted, np.array(list(self._recent), DIGEST))
            self._recent.clear()
        return self._sorted

    def add(self, item: bytes) -> None:
        """Add one digest."""
        if item not in self:
            self._recent.add(item)
            if len(self._recent) >= max(1 << 14, len(self._sorted) // 16):
                self.array()

    def __contains__(self, item: object) -> bool:
        return isinstance(item, bytes) and bool(self.contains(np.array([item], DIGEST))[0])

    def contains(self, digests: np.ndarray) -> np.ndarray:
        """For each digest of the ``S8`` array ``digests``, whether the set holds it (vectorized)."""
        found = np.zeros(len(digests), bool)
        if len(self._sorted) and len(digests):
            at = np.minimum(np.searchsorted(self._sorted, digests), len(self._sorted) - 1)
            found = self._sorted[at] == digests  # (S8 compares all 8 bytes: digests have no short form)
        if self._recent:
            found |= np.fromiter((bytes(d).ljust(8, b"\0") in self._recent for d in digests), bool,
                                 len(digests))
        return found

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)


@dataclass
class StreamPosition:
    """Where one rank of a trainer group stands: its epoch and the rows it delivered in it.

    Attributes:
        group: the trainer group (each group receives every row once per epoch).
        rank: this rank, from 0.
        world_size: the group's ranks.
        epoch: the pass over the dataset, from 0.
        delivered: digests of the ids delivered in this epoch.
    """

    group: str
    rank: int
    world_size: int
    epoch: int = 0
    delivered: DigestSet = field(default_factory=DigestSet)

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} of world size {self.world_size}: need 0 <= rank < world_size")
        if not self.group or "/" in self.group or self.group.startswith("."):
            raise ValueError(f"a trainer group is a plain name (no '/', not starting with '.'), not "
                             f"{self.group!r}")

    def wants(self, row_id: str) -> bool:
        """Whether ``row_id`` is this rank's and not delivered yet this epoch."""
        return shard_of(row_id, self.world_size) == self.rank and digest(row_id) not in self.delivered

    def deliver(self, row_id: str) -> None:
        """Note ``row_id`` as delivered."""
        self.delivered.add(digest(row_id))

    def next_epoch(self) -> None:
        """Start the next epoch: every row is to be delivered again."""
        self.epoch += 1
        self.delivered = DigestSet()

    def to_state(self) -> dict[str, Any]:
        """The position as a plain dict (bytes inside): what a trainer saves in its checkpoint."""
        return {"version": STATE_VERSION, "group": self.group, "rank": self.rank,
                "world_size": self.world_size, "epoch": self.epoch, "delivered": self.delivered.to_bytes()}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StreamPosition:
        """The position :meth:`to_state` gave.

        Raises:
            ValueError: not a stream position, or one of a newer version.
        """
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not an eaglefeed stream position (version {STATE_VERSION}): {state!r:.80}")
        return cls(group=str(state["group"]), rank=int(state["rank"]), world_size=int(state["world_size"]),
                   epoch=int(state["epoch"]), delivered=DigestSet.from_bytes(bytes(state["delivered"])))
