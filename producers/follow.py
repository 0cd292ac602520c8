"""The input stream: every input read once, or (``--follow``) watched for new lines and new files.

Following polls: each round rescans the folders, reads what was appended to JSONL files since the
last round and reads JSON arrays and Parquet files whole once they stop changing. A trailing
line without a newline waits until the file has been quiet for ``settle`` seconds. When a round
finds nothing new the stream yields :data:`IDLE`, so the publisher can flush and save progress.
Reading starts where the ledger says the acknowledged rows end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.producers.ledger import Ledger
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


class _Scanner:
    """Remembers how far each file has been read in this run."""

    def __init__(self, *, ledger: Ledger | None, follow: bool, settle: float) -> None:
        self.ledger = ledger
        self.follow = follow
        self.settle = settle
        self.read_to: dict[str, dict[str, int]] = {}

    def read(self, file: InputFile) -> Iterator[SourceRow | Mark]:
        try:
            st = file.path.stat()
        except FileNotFoundError:  # removed since the folder scan
            return
        quiet = not self.follow or time.time() - st.st_mtime >= self.settle
        position = self.read_to.get(file.key) or (self.ledger.get(file.key) if self.ledger else None)
        if file.kind != "jsonl":
            state = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
            if position != state and quiet:
                self.read_to[file.key] = state
                yield from read_whole(file, state)
            return
        if position and (position.get("inode") != st.st_ino or position.get("offset", 0) > st.st_size):
            log.warning("%s was replaced or truncated; reading it from the start", file.path)
            position = self.read_to[file.key] = {"offset": 0, "line": 0, "inode": st.st_ino}
        offset = position["offset"] if position else 0
        if st.st_size == offset:
            return
        line = position["line"] if position else 0
        for item in read_jsonl(file, offset=offset, line=line, final=quiet, inode=st.st_ino):
            if isinstance(item, Mark):
                self.read_to[file.key] = item.state
            yield item
