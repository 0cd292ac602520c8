"""The input stream: every input read once, or (``--follow``) watched for new lines and new files.

Following polls: each round rescans the folders, reads what was appended to JSONL files since the
last round and reads JSON arrays and Parquet files whole once they stop changing. A trailing
line without a newline waits until the file has been quiet for ``settle`` seconds. When a round
finds nothing new the stream yields :data:`IDLE`, so the publisher can flush and save progress.
Reading starts where the ledger says the acknowledged rows end, if the file still starts with
the bytes those rows came from (otherwise from the start; see :mod:`eaglefeed.producers.position`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.producers.ledger import Ledger
from eaglefeed.producers.position import Hasher, Position, hash_prefix, tail_before, verify
from eaglefeed.producers.sources import (
    STDIN,
    InputFile,
    Mark,
    SourceRow,
    discover,
    read_jsonl,
    read_stdin,
    read_whole,
)

log = logging.getLogger(__name__)


class Idle:
    """Nothing new in the inputs this round."""


IDLE = Idle()
StreamItem = SourceRow | Mark | Idle


def input_stream(inputs: Sequence[str], *, files: Sequence[InputFile] | None = None,
                 ledger: Ledger | None = None, follow: bool = False, stop: StopSignal | None = None,
                 poll_interval: float = 1.0, settle: float = 5.0) -> Iterator[StreamItem]:
    """Rows and marks of ``inputs`` (stdin first, if ``-`` is among them).

    Args:
        inputs: files, folders and ``-``.
        files: what :func:`discover` found for ``inputs`` at start-up, read in the first round
            (found here when omitted); ``follow`` looks for new files again in every later round.
        ledger: where acknowledged positions are kept; reading resumes from them.
        follow: keep watching until ``stop`` is set, instead of ending after one pass.
        stop: ends the stream between rounds (and between files).
        poll_interval: seconds between rounds that found nothing new.
        settle: seconds a file must stay unchanged before a line without a newline, or a
            whole JSON/Parquet file, is read (``--follow`` only).
    """
    stop = stop or StopSignal()
    if STDIN in inputs:
        yield from read_stdin()
    scanner = _Scanner(ledger=ledger, follow=follow, settle=settle)
    while not stop.is_set():
        progressed = False
        if files is None:
            files = discover(inputs, missing_ok=follow)
        for file in files:
            for item in scanner.read(file):
                progressed = True
                yield item
            if stop.is_set():
                return
        if not follow:
            return
        files = None  # every later round looks for new files
        if not progressed:
            yield IDLE
            stop.wait(poll_interval)


@dataclass
class _Cursor:
    """How far a JSONL file has been read in this run, with the running hash of those bytes."""

    position: Position
    hasher: Hasher  # holds exactly the first ``position.offset`` bytes
    inode: int
    tail: bytes  # the last bytes before ``position.offset``

    def holds(self, path: Path, st: os.stat_result) -> bool:
        """Whether the file ``st`` describes still looks like the one read (checked each round)."""
        if st.st_ino != self.inode or st.st_size < self.position.offset:
            return False
        if self.tail and not self.tail.endswith(b"\n") and st.st_size > self.position.offset:
            return False  # a last line read without its newline has grown: that line changed
        return not self.tail or tail_before(path, self.position.offset, size=len(self.tail)) == self.tail


class _Scanner:
    """Remembers how far each file has been read in this run; resumes from the ledger only on matching bytes.

    The first time a run meets a file with a saved position it hashes the file's first
    ``offset`` bytes and resumes only when they match (:func:`verify`). Between ``--follow``
    rounds it checks the inode, the size and the bytes just before the position instead.
    """

    def __init__(self, *, ledger: Ledger | None, follow: bool, settle: float) -> None:
        self.ledger = ledger
        self.follow = follow
        self.settle = settle
        self.cursors: dict[str, _Cursor] = {}
        self.whole: dict[str, tuple[Position, tuple[int, int, int]]] = {}

    def read(self, file: InputFile) -> Iterator[SourceRow | Mark]:
        try:
            st = file.path.stat()
        except FileNotFoundError:  # removed since the folder scan
            return
        quiet = not self.follow or time.time() - st.st_mtime >= self.settle
        if file.kind != "jsonl":
            if quiet:
                yield from self._read_whole(file, st)
            return
        cursor = self._cursor(file, st)
        if st.st_size == cursor.position.offset:
            return
        running = cursor.hasher.copy()  # at a mark it holds exactly the bytes before the mark
        for item in read_jsonl(file, offset=cursor.position.offset, line=cursor.position.line,
                               hasher=running, final=quiet):
            if isinstance(item, Mark):  # the next round goes on from the last mark, not the last line
                self.cursors[file.key] = _Cursor(item.state, running.copy(), st.st_ino, item.tail)
            yield item

    def _cursor(self, file: InputFile, st: os.stat_result) -> _Cursor:
        cursor = self.cursors.get(file.key)
        if cursor is not None and not cursor.holds(file.path, st):
            log.warning("%s was replaced or rewritten; reading it again from the start", file.path)
            cursor = None
        elif cursor is None and self.ledger is not None and (saved := self.ledger.get(file.key)):
            hasher = verify(file.path, saved)
            if hasher is not None:
                cursor = _Cursor(saved, hasher, st.st_ino, tail_before(file.path, saved.offset) or b"")
            if cursor is None or not cursor.holds(file.path, st):
                cursor = None
                log.warning("%s changed since the run that read its first %d lines: reading it again "
                            "from the start (prompts already published are deduplicated by id)",
                            file.path, saved.line)
        if cursor is None:
            cursor = self.cursors[file.key] = _Cursor(Position(0, 0, EMPTY_SHA256), hashlib.sha256(),
                                                      st.st_ino, b"")
        return cursor

    def _read_whole(self, file: InputFile, st: os.stat_result) -> Iterator[SourceRow | Mark]:
        """A JSON array or Parquet file, read again whenever its bytes differ from the last read."""
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        seen = self.whole.get(file.key)
        if seen is not None and seen[1] == signature:
            return  # unchanged since this run read it
        done = seen[0] if seen is not None else (self.ledger.get(file.key) if self.ledger else None)
        if done is not None and done.offset == st.st_size:
            hashed = hash_prefix(file.path)
            if hashed is not None and hashed.hexdigest() == done.sha256:
                self.whole[file.key] = (done, signature)
                return
        if done is not None:
            log.warning("%s changed since it was read: reading it again", file.path)
        for item in read_whole(file):
            if isinstance(item, Mark):
                self.whole[file.key] = (item.state, signature)
            yield item


EMPTY_SHA256 = hashlib.sha256().hexdigest()

