"""Loss-token frequencies: counted once per file as it is written, summed for any snapshot.

EAGLE-3 draft vocabularies are chosen from how often each token id is generated (loss_mask 1).
The sink counts a segment's generated ids from the decoded batch and writes them to a small
sidecar, ``freq/<segment stem>.npz`` (sorted ``ids`` int32, ``counts`` int64), fsynced and
renamed before the manifest event that lists the segment; the entry names it under ``freq``.
Compaction counts each shard as it writes it. A snapshot's totals are then a sum of sidecars;
a file without one (written before sidecars existed, or its sidecar lost) is counted from its
Parquet columns, and reported as such.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.identity import refuse_mixed
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.dataset.shards import FREQ as FREQ  # re-exported: the folder is known as freq.FREQ
from eaglefeed.dataset.shards import temp_name
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.schemas.columnar import GenerationBatch


class TokenCounter:
    """Dense per-id counts that grow with the largest id seen (a target vocabulary is ~10^5 ids)."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, np.int64)

    def add_ids(self, ids: np.ndarray) -> None:
        """Count every id of ``ids`` once.

        Raises:
            DatasetError: an id is negative.
        """
        if ids.size == 0:
            return
        if int(ids.min()) < 0:
            raise DatasetError(f"negative token id {int(ids.min())} among the loss tokens")
        self.add_sparse(*_sparse(np.bincount(ids)))

    def add_sparse(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts[i]`` to id ``ids[i]`` (ids unique)."""
        if ids.size == 0:
            return
        top = int(ids.max()) + 1
        if top > self.counts.size:
            self.counts = np.concatenate([self.counts, np.zeros(top - self.counts.size, np.int64)])
        self.counts[ids] += counts

    def sparse(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts) of every id counted at least once, ids ascending."""
        return _sparse(self.counts)

    @property
    def total(self) -> int:
        """Loss tokens counted."""
        return int(self.counts.sum())


def count_batch(batch: GenerationBatch) -> TokenCounter:
    """The output ids of a decoded batch (exactly the loss_mask 1 positions of its rows)."""
    counter = TokenCounter()
    is_output = np.repeat(np.tile(np.array([False, True]), len(batch)),
                          np.stack([batch.prompt_len, batch.output_len], axis=1).reshape(-1))
    counter.add_ids(batch.tokens[is_output])
    return counter


def count_table(table: pa.Table | pa.RecordBatch, counter: TokenCounter | None = None) -> TokenCounter:
    """Add the ids under loss_mask 1 of training rows (``input_ids``, ``loss_mask``) to ``counter``."""
    counter = counter or TokenCounter()
    ids, mask = table.column("input_ids"), table.column("loss_mask")
    chunks = zip(_chunks(ids), _chunks(mask), strict=True)
    for id_chunk, mask_chunk in chunks:
        values = id_chunk.flatten().to_numpy(zero_copy_only=False)
        flags = mask_chunk.flatten().to_numpy(zero_copy_only=False)
        counter.add_ids(values[flags == 1])
    return counter


def write_sidecar(root: Path, segment_name: str, counter: TokenCounter) -> str:
    """Write ``freq/<stem>.npz`` atomically (temp file, fsync, rename, fsync dir); returns its path.

    Args:
        root: the dataset directory.
        segment_name: the Parquet file's name, e.g. ``topic-p0000-...parquet``.
        counter: its loss-token counts.
    """
    staged = stage_sidecar(root, segment_name, counter)
    staged.publish()
    return staged.path


class StagedSidecar:
    """A sidecar written and fsynced under its temp name; :meth:`publish` renames it into place.

    Attributes:
        path: its path relative to the dataset directory, once published.
    """

    def __init__(self, folder: Path, name: str) -> None:
        self.final = folder / name
        self.tmp = folder / temp_name(name)
        self.path = f"{FREQ}/{name}"

    def publish(self) -> None:
        """Rename the file into place (durably)."""
        os.replace(self.tmp, self.final)
        fd = os.open(self.final.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Remove the temp file (it is not to be published)."""
        self.tmp.unlink(missing_ok=True)


def stage_sidecar(root: Path, segment_name: str, counter: TokenCounter) -> StagedSidecar:
    """Write the sidecar of ``segment_name`` to its temp file and fsync it (see :func:`write_sidecar`)."""
    folder = Path(root) / FREQ
    folder.mkdir(parents=True, exist_ok=True)
    staged = StagedSidecar(folder, f"{Path(segment_name).stem}.npz")
    ids, counts = counter.sparse()
    try:
        with open(staged.tmp, "wb") as fh:
            np.savez(fh, ids=ids.astype(np.int32), counts=counts)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        staged.discard()
        raise
    return staged


def read_sidecar(root: Path, rel: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, counts) stored in a sidecar.

    Raises:
        DatasetError: it is missing or unreadable.
    """
    try:
        with np.load(Path(root) / rel, allow_pickle=False) as data:
            return data["ids"].astype(np.int64), data["counts"].astype(np.int64)
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read token counts {rel}: {exc}") from exc


@dataclass
class SnapshotCounts:
    """Loss-token counts of a dataset's live files.

    Attributes:
        counter: the summed counts.
        rows: rows of the files counted (from the manifest).
        from_sidecars: files whose counts came from their sidecar.
        rescanned: files without a sidecar, counted from their Parquet columns.
    """

    counter: TokenCounter = field(default_factory=TokenCounter)
    rows: int = 0
    from_sidecars: int = 0
    rescanned: list[str] = field(default_factory=list)


def snapshot_counts(root: Path, *, allow_mixed: bool = False) -> SnapshotCounts:
    """Sum the loss-token counts of every live file of ``root`` (a rescan only for files without sidecar).

    Raises:
        DatasetError: ``root`` is not a dataset, a file cannot be read, or its rows were made with
            more than one tokenizer, chat template or model and ``allow_mixed`` is false.
    """
    root = Path(root)
    out = SnapshotCounts()
    with snapshot(root) as files:  # holds compaction's deletions off while we read
        refuse_mixed(files, allow_mixed=allow_mixed)
        for entry in live_segments(read_manifest(root)).values():
            out.rows += int(entry["rows"])
            if entry.get(FREQ) and (root / entry[FREQ]).is_file():
                out.counter.add_sparse(*read_sidecar(root, entry[FREQ]))
                out.from_sidecars += 1
                continue
            columns = ("input_ids", "loss_mask")
            for batch in iter_batches([root / entry["path"]], columns=columns, batch_rows=4096):
                count_table(batch, out.counter)
            out.rescanned.append(entry["path"])
    return out


def sidecar_paths(entries: Iterable[dict[str, Any]]) -> set[str]:
    """The sidecar paths that manifest entries name."""
    return {e[FREQ] for e in entries if e.get(FREQ)}


def _sparse(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.flatnonzero(dense)
    return ids, dense[ids].astype(np.int64)


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]
