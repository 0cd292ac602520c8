"""The passes of one capture run: files read row by row, rows captured by workers, files replaced."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset import state_fill
from eaglefeed.dataset.hidden_states import STORE, HiddenStatesRef
from eaglefeed.dataset.state_fill import FileToFill, MissingRow
from eaglefeed.ops.capture_options import CaptureOptions
from eaglefeed.ops.capture_row import RowCapture
from eaglefeed.ops.capture_startup import check_servers, like_the_rows, open_clients
from eaglefeed.ops.capture_summary import CaptureSummary, progress_line

log = logging.getLogger("eaglefeed.ops.capture_states")  # the command's one logger, whichever module logs


class CaptureRun:
    """One ``eaglefeed capture`` run on one dataset, its lock held by the caller (``run_capture``)."""

    def __init__(self, options: CaptureOptions, stop: StopSignal, report: Callable[[str], None]) -> None:
        self.opt = options
        self.root = Path(options.root)
        self.store = self.root / STORE
        self.stop = stop
        self.report = report
        self.summary = CaptureSummary()
        self.settings = options.capture
        self.row_capture: RowCapture | None = None
        self.fatal: BaseException | None = None
        self.fills: list[asyncio.Task[None]] = []
        self.fill_lock = asyncio.Lock()
        self.moved = 0  # files of this pass a compaction merged before their turn
        # the rows of files a compaction merged before their turn (None: given up), met again in its shard
        self.carried: dict[str, HiddenStatesRef | None] = {}
        self.made: set[str] = set()  # the files this run wrote (rows left without states are not retried)
        self.first_pass = True
        self.started = time.monotonic()

    async def main(self, transport: httpx.AsyncBaseTransport | None) -> CaptureSummary:
        """Check the servers, then do every pass; the summary (its ``seconds`` set however it ends)."""
        http, pool = open_clients(self.opt, transport)
        progress: asyncio.Task[None] | None = None
        try:
            found = await asyncio.to_thread(state_fill.scan, self.root)
            self.summary.already = found.referenced
            self.settings = like_the_rows(self.settings, found.formats, self.root)
            layers = await check_servers(pool, http, self.settings, timeout=self.opt.connect_timeout,
                                         stop=self.stop)
            names = await asyncio.to_thread(state_fill.store_names, self.store)
            self.row_capture = RowCapture(options=self.opt, store=self.store, pool=pool, http=http,
                                          settings=self.settings, layers=layers, names=names,
                                          summary=self.summary)
            if self.opt.progress_seconds > 0:
                progress = asyncio.create_task(self._progress())
            await self._passes(found)
        finally:
            if progress is not None:
                progress.cancel()
            await asyncio.gather(*self.fills, return_exceptions=True)
            await pool.close()
            await http.aclose()
            self.summary.seconds = time.monotonic() - self.started
        return self.summary

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(self.opt.progress_seconds)
            self.report(progress_line(self.summary, time.monotonic() - self.started))

    async def _passes(self, found: state_fill.Scan) -> None:
        """Do every file; again for the rows a compaction moved into new files meanwhile."""
        seen: set[str] = set()
        while True:
            todo = [f for f in found.files if f.path not in seen and f.path not in self.made]
            if not todo:
                return
            seen.update(f.path for f in todo)
            if self.first_pass:  # later passes count the rows they meet for the first time only
                self.summary.total += sum(f.missing for f in todo)
            moved = await self._pass(todo)
            self.first_pass = False
            if self.fatal is not None:
                raise self.fatal
            if self.stop.is_set():
                self.summary.stopped = True
                return
            if not moved:
                return
            found = await asyncio.to_thread(state_fill.scan, self.root)

    async def _pass(self, todo: list[FileToFill]) -> int:
        """Capture every missing row of ``todo``, replacing each file once its rows are done; files moved."""
        queue: asyncio.Queue[tuple[_File, MissingRow] | None] = asyncio.Queue(
            maxsize=2 * self.opt.concurrency)
        workers = [asyncio.create_task(self._worker(queue)) for _ in range(self.opt.concurrency)]
        self.moved = 0
        try:
            for target in todo:
                if self._halted():
                    break
                await self._queue_file(target, queue)
        finally:
            for _ in workers:
                await queue.put(None)
            await asyncio.gather(*workers)
            fills, self.fills = self.fills, []
            for outcome in await asyncio.gather(*fills, return_exceptions=True):
                if isinstance(outcome, BaseException) and self.fatal is None:
                    self.fatal = outcome
        return self.moved

    def _halted(self) -> bool:
        return self.fatal is not None or self.stop.is_set()

    async def _queue_file(self, target: FileToFill,
                          queue: asyncio.Queue[tuple[_File, MissingRow] | None]) -> None:
        """Queue the missing rows of ``target`` (until a halt); its fill starts once they are all done."""
        work = _File(target)
        rows: Iterator[list[MissingRow]] = state_fill.missing_rows(self.root, target.path)
        while not self._halted():
            batch = await asyncio.to_thread(next, rows, None)
            if batch is None:
                break
            for row in batch:
                if self._halted():
                    break
                work.pending += 1
                work.read += 1
                await queue.put((work, row))
        if self._halted():
            work.complete = False
        elif self.first_pass and work.read < target.missing:
            # compacted before it was read: its rows are met (and counted) in the new file
            self.summary.total -= target.missing - work.read
        work.scanned = True
        self._maybe_fill(work)

    async def _worker(self, queue: asyncio.Queue[tuple[_File, MissingRow] | None]) -> None:
        while (item := await queue.get()) is not None:
            work, row = item
            try:
                if self._halted():
                    work.complete = False
                    continue
                ref = await self._row(row)
                if ref is None:
                    work.failed.append(row.id)
                    continue
                work.refs[row.id] = ref
            except (ConfigError, DatasetError) as exc:
                self.fatal = self.fatal or exc
                work.complete = False
            except Exception as exc:  # a bug must not hang the other workers
                self.fatal = self.fatal or exc
                work.complete = False
            finally:
                work.pending -= 1
                self._maybe_fill(work)

    async def _row(self, row: MissingRow) -> HiddenStatesRef | None:
        """The row's checked reference: its file from an earlier run, else a new capture; None: failed."""
        if row.id in self.carried:  # done in an earlier pass, before a compaction moved it
            return self.carried.pop(row.id)
        if not self.first_pass:
            self.summary.total += 1
        assert self.row_capture is not None
        return await self.row_capture.ref(row)

    def _maybe_fill(self, work: _File) -> None:
        if work.scanned and work.pending == 0 and not work.queued:
            work.queued = True
            if work.complete and work.refs:
                self.fills.append(asyncio.create_task(self._fill(work)))

    async def _fill(self, work: _File) -> None:
        async with self.fill_lock:  # one file at a time: the compaction lock is one too
            result = await asyncio.to_thread(state_fill.fill_file, self.root, work.target.path, work.refs)
        if result.moved:
            self.moved += 1
            self.carried.update(work.refs)
            self.carried.update(dict.fromkeys(work.failed))
            log.info("capture: %s was compacted meanwhile: its rows are done in its new file",
                     work.target.path)
            return
        if result.lost:
            self.summary.fail_rows(len(result.lost), "lost", f"{len(result.lost)} files of "
                                   f"{work.target.path} vanished before their rows named them (gc with a "
                                   "short --grace-seconds?)")
            return
        self.summary.files += 1
        self.summary.rows_filled += result.filled
        if result.new_path is not None:
            self.made.add(result.new_path)
        log.info("capture: %s → %s (%d rows now reference their states)", result.path, result.new_path,
                 result.filled)


@dataclass
class _File:
    """One Parquet file being done: its rows' references as they come in."""

    target: FileToFill
    refs: dict[str, HiddenStatesRef] = field(default_factory=dict)
    pending: int = 0  # rows in the queue or in flight
    read: int = 0
    scanned: bool = False
    failed: list[str] = field(default_factory=list)  # rows given up
    complete: bool = True  # False once a row of it was skipped by a stop
    queued: bool = False
