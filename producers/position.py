"""How far an input was consumed, and a fingerprint of those bytes: a position holds while they are unchanged.

A :class:`Position` says the first ``offset`` bytes of an input file were consumed and that their
sha256 was ``sha256``. Resuming after it is sound exactly when the file still starts with those
bytes (:func:`verify`); anything else (an edit, ``cp`` over the file, a truncation, another file
under the same name) reads the file again from the start, and deterministic prompt ids dedupe
what was published before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hashlib import _Hash as Hasher
else:
    Hasher = Any

__all__ = ["TAIL", "Hasher", "Position", "hash_prefix", "tail_before", "verify"]

CHUNK = 1 << 20
TAIL = 512  # bytes before a position compared between --follow rounds (the full check is per run)


@dataclass(frozen=True)
class Position:
    """The first ``offset`` bytes (``line`` lines, or rows of a whole file) were consumed; their sha256."""

    offset: int
    line: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The ledger's layout of this position."""
        return {"offset": self.offset, "line": self.line, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Any) -> Position:
        """The position saved as ``data``.

        Raises:
            ValueError: when ``data`` is not a saved position.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a position must be an object, not {data!r}")
        offset, line, digest = data.get("offset"), data.get("line"), data.get("sha256")
        if not (isinstance(offset, int) and isinstance(line, int) and isinstance(digest, str)):
            raise ValueError(f"not a position: {data!r}")
        return cls(offset=offset, line=line, sha256=digest)


def verify(path: Path, position: Position) -> Hasher | None:
    """The running hash of the consumed prefix when ``path`` still starts with exactly those bytes.

    Args:
        path: the input file.
        position: what was consumed of it.

    Returns:
        a sha256 object holding the first ``position.offset`` bytes (reading goes on from there),
        or None when the file is shorter, gone, or its first bytes differ.
    """
    hasher = hash_prefix(path, size=position.offset)
    return hasher if hasher is not None and hasher.hexdigest() == position.sha256 else None


def hash_prefix(path: Path, *, size: int | None = None) -> Hasher | None:
    """The sha256 of the first ``size`` bytes of ``path`` (all of it when None); None if it has fewer."""
    hasher = hashlib.sha256()
    left = size
    try:
        with open(path, "rb") as fh:
            while left is None or left > 0:
                chunk = fh.read(CHUNK if left is None else min(CHUNK, left))
                if not chunk:
                    return hasher if left is None else None
                hasher.update(chunk)
                if left is not None:
                    left -= len(chunk)
    except FileNotFoundError:
        return None
    return hasher


def tail_before(path: Path, offset: int, *, size: int = TAIL) -> bytes | None:
    """The ``size`` bytes (fewer near the start) before ``offset``; None when the file is gone."""
    start = max(offset - size, 0)
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read(offset - start)
    except FileNotFoundError:
        return None
