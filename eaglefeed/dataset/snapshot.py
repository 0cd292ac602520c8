"""Reading a dataset safely while the sink and compaction write it: live files, streamed batches, tables."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.manifest import GC_LOCK, MANIFEST, live_segments, locked, read_manifest
from eaglefeed.dataset.shards import TRAINING_SCHEMA, conform


@contextmanager
def snapshot(root: Path) -> Iterator[list[Path]]:
    """The dataset's live files as the manifest lists them now; none is deleted while the block runs.

    Raises:
        DatasetError: ``root`` has no manifest.
    """
    root = Path(root)
    if not (root / MANIFEST).is_file():
        raise DatasetError(f"{root} is not an eaglefeed dataset (no {MANIFEST})")
    with locked(root, GC_LOCK, shared=True):
        yield [root / rel for rel in live_segments(read_manifest(root))]


def iter_batches(files: Sequence[Path], columns: Sequence[str] | None = None,
                 batch_rows: int = 1024) -> Iterator[pa.RecordBatch]:
    """Record batches of ``files`` in order, ``batch_rows`` at a time (memory stays bounded).

    Raises:
        DatasetError: a file cannot be read.
    """
    for path in files:
        try:
            reader = pq.ParquetFile(path)
            yield from reader.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {path}: {exc}") from exc


def read_table(files: Sequence[Path], schema: pa.Schema = TRAINING_SCHEMA) -> pa.Table:
    """``files`` in one table of ``schema``'s columns, in order, each conformed to the current schema.

    Files written by older schema versions get the columns added since (``shards.conform``).

    Raises:
        DatasetError: a file cannot be read.
    """
    tables = []
    for path in files:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {path}: {exc}") from exc
        # conform adds the columns of later schema versions, then the wanted ones are kept
        tables.append(conform(table, TRAINING_SCHEMA).cast(TRAINING_SCHEMA).select(schema.names))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables).replace_schema_metadata(schema.metadata)
