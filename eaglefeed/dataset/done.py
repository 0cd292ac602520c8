"""Which prompts a dataset already holds, for ``--skip-done``: read from the sink's live files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eaglefeed.core.errors import ConfigError, EaglefeedError
from eaglefeed.dataset.snapshot import snapshot


def load_done(dataset: Path, samples: int) -> frozenset[int]:
    """The prompt ids (as 128-bit integers) with at least ``samples`` rows in ``dataset``.

    Only the ``prompt_id`` column of the files the manifest lists as live is read (under the
    dataset's snapshot lock, so compaction cannot delete them meanwhile). The sink deduplicates
    rows by ``prompt_id:sample_index``, so a prompt's row count is its sample count.

    Raises:
        ConfigError: when ``dataset`` is not a dataset or a live file cannot be read.
    """
    chunks: list[pa.Array] = []
    try:
        with snapshot(dataset) as files:
            for path in files:
                column = pq.read_table(path, columns=["prompt_id"]).column("prompt_id")
                chunks.extend(column.cast(pa.string()).chunks)
    except (EaglefeedError, OSError, pa.ArrowException) as exc:
        raise ConfigError(f"--skip-done {dataset}: {exc}") from exc
    if not chunks:
        return frozenset()
    counts = pc.value_counts(pa.chunked_array(chunks, type=pa.string()))
    enough = pc.greater_equal(counts.field("counts"), samples)
    return frozenset(int(pid, 16) for pid in pc.filter(counts.field("values"), enough).to_pylist())
