"""The progress ledger: how far each input file is published and acknowledged, to resume after a restart."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO

from eaglefeed.errors import ConfigError
from producers.sources import Mark

LEDGER_VERSION = 1


class Ledger:
    """Per input file (by absolute path), the position up to which every row is acknowledged.

    JSONL files keep ``{"offset", "line", "inode"}``; JSON arrays and Parquet files, read whole,
    keep ``{"size", "mtime_ns"}``. Positions move in two steps: :meth:`advance` once the rows before
    a mark are sent, :meth:`commit` once the producer has flushed them. A lock file keeps a second
    producer off the same ledger.

    Args:
        path: the ledger file; its folder is created.

    Raises:
        ConfigError: when another producer holds the ledger or the file is not a ledger.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock: IO[str] = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ConfigError(f"another producer is using the progress ledger {path}") from None
        self._saved = self._load()
        self._advanced: dict[str, dict[str, int]] = {}

    @classmethod
    def for_prefix(cls, state_dir: Path, topic_prefix: str) -> Ledger:
        """The ledger of the producer that publishes to ``topic_prefix``, kept in ``state_dir``."""
        return cls(state_dir / f"{topic_prefix}.ledger.json")

    def get(self, key: str) -> dict[str, int] | None:
        """The acknowledged position of input ``key``, if any."""
        return self._saved.get(key)

    def advance(self, mark: Mark) -> None:
        """Note that every row before ``mark`` has been sent."""
        self._advanced[mark.key] = mark.state

    def commit(self) -> None:
        """Persist the advanced positions (call after the producer flushed without errors)."""
        if not self._advanced:
            return
        self._saved.update(self._advanced)
        self._advanced.clear()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": LEDGER_VERSION, "files": self._saved}, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Release the lock (uncommitted positions are dropped: their rows will be read again)."""
        self._lock.close()

    def _load(self) -> dict[str, dict[str, int]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files = data["files"]
            if data.get("version") != LEDGER_VERSION or not isinstance(files, dict):
                raise ValueError("unknown layout")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._lock.close()
            raise ConfigError(f"{self.path} is not a progress ledger ({exc}); "
                              "move it away to start over") from exc
        return files
