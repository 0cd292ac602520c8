"""The sink's id index (step 2 of the commit order) and its whole life cycle, in one owner.

:class:`SinkIds` alone holds the ``eaglefeed.dataset.ids.IdIndex`` and decides when it is read
or forgotten; the rest of the sink only reports events to it:
    * partitions assigned (``SinkCheckpoint.assigned``, in the rebalance callback): stale, since
      another sink may have written ids since we last looked; only marked, so the callback's
      cost does not grow with the dataset;
    * a segment fenced (the writer's count, reported on assignment and after each commit): every
      id forgotten and read again, since the fenced segment's ids were claimed but never written;
    * a segment built (``SegmentBuilder.build``): read first if stale (sync before use), then
      its ids claimed;
    * a commit ran (``SinkCheckpoint.commit``, on the main thread): read now if stale, so a
      segment built in a rebalance callback (a revoke) never waits for the whole dataset.

Why a class of its own rather than the builder or the checkpoint: the events come from two
places (only the checkpoint sees assignments, fenced segments and the main thread's commits;
only the builder claims), so whichever of the two held the index would take orders from the
other about its state. Both hold a :class:`SinkIds` instead; neither knows whether it is stale.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset.ids import IdIndex

log = logging.getLogger(__name__)


class SinkIds:
    """The ids the dataset holds, kept up to date for one sink process.

    Args:
        root: the dataset directory (its ids, compacted shards and dropped ids included).
        metrics: the index-size gauge.
    """

    def __init__(self, *, root: Path, metrics: SinkMetrics) -> None:
        self._root = Path(root)
        self._metrics = metrics
        self._index = IdIndex()
        self._stale = True  # nothing read yet
        self._fenced_seen = 0  # the writer's count of fenced segments, as of the last report

    def claim(self, ids: Sequence[str]) -> list[bool]:
        """Step 2: record ``ids`` as written, reading the index first if it is stale.

        Returns:
            True for each id the dataset does not hold yet (a repeat within ``ids`` is False).
        """
        self.sync()
        return self._index.claim(ids)

    def assigned(self, *, fenced: int) -> None:
        """Partitions were assigned: read the ids again before the next claim (marks only, cheap).

        Args:
            fenced: the writer's count of fenced segments since the start.
        """
        self._forget_fenced(fenced)
        self._stale = True

    def must_forget(self, *, fenced: int) -> bool:
        """Whether the next report of ``fenced`` forgets every id (a segment was fenced since the last).

        The caller first waits for the segments still being written: their ids are claimed but not
        yet in the dataset, so forgetting them before they land would let a redelivery through.
        """
        return fenced != self._fenced_seen

    def committed(self, *, fenced: int) -> None:
        """A commit ran on the main thread: forget fenced claims, read what is stale now.

        Args:
            fenced: the writer's count of fenced segments since the start.
        """
        self._forget_fenced(fenced)
        self.sync()

    def sync(self) -> None:
        """Read the ids written since the last sync, if an assignment or a fence made the index stale."""
        if not self._stale:
            return
        started = time.perf_counter()
        read = self._index.sync(self._root)
        self._stale = False
        self._metrics.index_ids.set(len(self._index))
        log.info("id index: %d ids (%d read in %.2fs)", len(self._index), read, time.perf_counter() - started)

    def _forget_fenced(self, fenced: int) -> None:
        """After a fenced segment, forget every id: its ids were claimed but never reached the dataset."""
        if fenced != self._fenced_seen:
            self._fenced_seen = fenced
            self._index = IdIndex()
            self._stale = True
