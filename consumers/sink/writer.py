"""A background thread that writes the sink's segments and manifest events, in submission order.

Parquet encoding and zstd run without the GIL, so while this thread writes one segment the
sink's main thread decodes the next. Jobs are written strictly in the order submitted, so a
partition's manifest events keep their offset order; at most ``max_pending`` jobs wait, which
bounds memory and slows the main thread down when the disk is the bottleneck.

Each job is fenced by the claim its partition was assigned under: its files are written under
temp names, and only under the manifest's write lock, if no newer claim of the partition is in
the manifest, renamed into place and recorded. A fenced job writes nothing (``fenced`` is set).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglefeed.core.diskspace import disk_full, is_disk_full
from eaglefeed.core.errors import EaglefeedError
from eaglefeed.dataset import freq, shards
from eaglefeed.dataset.manifest import ManifestTail
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.schemas.columnar import GenerationBatch


@dataclass
class WriteJob:
    """One segment to write (or none, when every record was a duplicate or a dead letter).

    Attributes:
        key: the partition, handed back with the finished job.
        event: the manifest event; ``added`` is filled in once the segment is on disk.
        next_offset: the offset to commit once the event is written.
        name: the segment file name, None without rows.
        rows: the decoded rows, None without rows (turned into a table on the writer thread,
            which balances the work between the two threads).
        markers: tokenizer id → marker ids, for the flag columns.
        started: ``time.perf_counter()`` when the flush began (for the latency metric).
        fence: ``topic:partition`` → the claim the partition was assigned under (empty: unfenced).
        fenced: set by the writer when a newer claim refused the job (nothing was written).
        records: the messages of the job.
    """

    key: Any
    event: dict[str, Any]
    next_offset: int
    name: str | None = None
    rows: GenerationBatch | None = None
    markers: dict[str, FlagMarkers] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    fence: dict[str, str] = field(default_factory=dict)
    fenced: bool = False
    records: int = 0  # the messages it covers (being written: the progress line counts them as buffered)


class SegmentWriter:
    """Write jobs on one thread; hand finished ones back to the thread that commits offsets.

    Args:
        root: the dataset directory.
        crash: test hook called with ``staged``, ``after_rename`` and ``after_manifest``.
        max_pending: jobs allowed to wait before :meth:`submit` blocks.
        tail: the manifest, read incrementally (appends are fenced through it).
    """

    def __init__(self, root: Path, *, crash: Callable[[str], None], max_pending: int = 1,
                 tail: ManifestTail | None = None) -> None:
        self.root = Path(root)
        self.crash = crash
        self.tail = tail or ManifestTail(self.root)
        self.fenced = 0  # jobs refused by a newer claim, since the start
        self.max_pending = max_pending
        self._queue: deque[WriteJob] = deque()
        self._done: list[WriteJob] = []
        self._busy = 0  # submitted and not yet finished (queued or being written)
        self._error: BaseException | None = None
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="segment-writer", daemon=True)
        self._thread.start()

    def submit(self, job: WriteJob) -> None:
        """Queue ``job``; blocks while ``max_pending`` jobs wait.

        Raises:
            DiskFullError: an earlier job met a full disk (the sink must stop; nothing after it is written).
            RuntimeError: an earlier job failed otherwise.
        """
        with self._cond:
            self._cond.wait_for(lambda: len(self._queue) < self.max_pending or self._error is not None)
            self._raise()
            self._queue.append(job)
            self._busy += 1
            self._cond.notify_all()

    def wait(self) -> None:
        """Block until every submitted job is written (or one failed, which raises)."""
        with self._cond:
            self._cond.wait_for(lambda: self._busy == 0 or self._error is not None)
            self._raise()

    def finished(self) -> list[WriteJob]:
        """Jobs written since the last call, in order (raises if a job failed)."""
        with self._cond:
            self._raise()
            done, self._done = self._done, []
            return done

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._raise()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return
                job = self._queue.popleft()
                self._cond.notify_all()  # room for one more waiting job
            try:
                self._write(job)
            except BaseException as exc:  # noqa: BLE001 - handed to the sink's thread, which stops
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self._done.append(job)
                self._busy -= 1
                self._cond.notify_all()

    def _write(self, job: WriteJob) -> None:
        """Commit steps 3 and 4 of the sink: segment file and its token counts, then its manifest event."""
        job.event["added"] = []
        files: list[shards.ParquetFile | freq.StagedSidecar] = []
        try:
            if job.rows is not None and job.name is not None:
                table = shards.batch_to_table(job.rows, job.markers)
                counts = freq.count_batch(job.rows)
                job.rows = None  # free the rows before the next job
                segment = shards.stage_segment(self.root, job.name, table)
                files.append(segment)
                sidecar = freq.stage_sidecar(self.root, job.name, counts)
                files.append(sidecar)
                # The sidecar is durable before the event that lists it (and its segment) is written.
                job.event["added"] = [segment.entry | {freq.FREQ: sidecar.path}]
            self.crash("staged")
            job.fenced = not self.tail.append(job.event, fence=job.fence, before=lambda: self._publish(files))
        except FileNotFoundError:
            # The partition's next owner deletes the temp files it never saw listed: if a newer
            # claim took the partition, this job lost it mid-write and is fenced, not a failure.
            for staged in files:
                staged.discard()
            if not (job.fence and self.tail.superseded(job.fence)):
                raise
            job.fenced = True
        except BaseException:
            for staged in files:
                staged.discard()
            raise
        if job.fenced:
            for staged in files:
                staged.discard()
            with self._cond:
                self.fenced += 1
            return
        self.crash("after_manifest")

    def _publish(self, files: list[shards.ParquetFile | freq.StagedSidecar]) -> None:
        """Under the manifest's write lock, once the fence passed: rename the job's files into place."""
        for staged in files:
            staged.publish()
        if files:
            self.crash("after_rename")

    @property
    def busy(self) -> bool:
        """Whether a submitted job is still queued or being written."""
        with self._cond:
            return self._busy > 0

    @property
    def failed(self) -> bool:
        """Whether a job failed (nothing after it is written; the sink must stop)."""
        return self._error is not None

    def _raise(self) -> None:
        if self._error is None:
            return
        if is_disk_full(self._error):
            raise disk_full(self.root, "nothing past the last segment in its manifest was committed: "
                                       "free some space and start the sink again") from self._error
        if isinstance(self._error, EaglefeedError):  # the store refused or failed: one line, not a traceback
            raise type(self._error)(f"{self._error}; nothing past the last segment in the manifest was "
                                    "committed: start the sink again once that is fixed") from self._error
        raise RuntimeError(f"writing a segment failed: {self._error!r}") from self._error
