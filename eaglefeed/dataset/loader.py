"""``eaglefeed.load``: a dataset's live rows in memory, as a pyarrow Table or a ``datasets.Dataset``.

The manifest says which files are live (:func:`eaglefeed.dataset.snapshot`), so a load taken
while the sink or a compaction runs sees whole files only, each once. Files written by older
schema versions are brought to the current one (``shards.conform``). With ``format`` the rows
are what ``eaglefeed export --format`` writes, as columns: the same rows, names and length cut.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.dataset.export import FORMATS, RENAMED
from eaglefeed.dataset.hidden_rows import HiddenStateRows
from eaglefeed.dataset.lengths import FRAMEWORK_FLAG, FRAMEWORK_MAX_LENGTH, POLICIES, LengthCut
from eaglefeed.dataset.shards import TRAINING_SCHEMA
from eaglefeed.dataset.snapshot import read_table, snapshot
from eaglefeed.dataset.store import open_dataset

log = logging.getLogger(__name__)

DATASETS_HINT = "pip install datasets (or, in a clone, pip install -e '.[datasets]')"


def load(root: str | os.PathLike[str], format: str | None = None, *, columns: Sequence[str] | None = None,
         max_length: int | None = None, policy: str | None = None, as_dataset: bool = False,
         hidden_states: bool = False, lanes: bool = False) -> Any:
    """Read the live rows of the dataset at ``root`` into memory.

    Args:
        root: the dataset directory (the sink's ``--output``), or ``s3://bucket/prefix`` (read
            through a local mirror, brought up to date first; a row's hidden states are
            downloaded when it is opened).
        format: None for every column of the training schema (README, "The dataset"), or an
            export format (``specforge``, ``speculators``): the columns that export writes
            (``id``, ``input_ids``, ``loss_mask``, ``seq_len``, ``source_id``).
        columns: read only these columns (without ``format``).
        max_length: with ``format``: the longest row to keep whole, as ``export --max-length``.
        policy: with ``max_length``: ``drop`` or ``truncate`` (``error`` raises if a row is longer).
        as_dataset: return a ``datasets.Dataset`` (needs the ``datasets`` package) instead of a
            ``pyarrow.Table``.
        hidden_states: return the rows as a sequence of dicts whose ``hidden_states`` opens the
            row's states lazily, memory-mapped (:class:`eaglefeed.dataset.hidden_rows.HiddenStates`).
        lanes: with ``hidden_states``: each ``tokens`` conversation lane as one row, its final
            turn's ids, a loss mask on every generated span and the states of all its turns
            (``eaglefeed export --lanes`` writes the same rows).

    Returns:
        a ``pyarrow.Table``, a ``datasets.Dataset`` with ``as_dataset``, or a
        :class:`~eaglefeed.dataset.hidden_rows.HiddenStateRows` with ``hidden_states``.

    Raises:
        DatasetError: ``root`` is not a dataset, a file cannot be read, or ``policy`` is ``error``
            and a row is longer than ``max_length``.
        ValueError: an unknown format, column or policy, or options that do not go together.
        ConfigError: ``as_dataset`` without the ``datasets`` package installed.
    """
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; one of {sorted(FORMATS)} or None")
    if format is not None and columns is not None:
        raise ValueError("columns= and format= do not go together: a format has its own columns")
    if max_length is not None and (format is None or max_length < 1 or policy not in POLICIES):
        raise ValueError(f"max_length needs format= and a positive length with a policy in {POLICIES}, "
                         f"got {format!r}, {max_length!r} and {policy!r}")
    if columns is not None and (unknown := set(columns) - set(TRAINING_SCHEMA.names)):
        raise ValueError(f"unknown columns {sorted(unknown)}")
    if lanes and not hidden_states:
        raise ValueError("lanes=True goes with hidden_states=True")
    if hidden_states and (as_dataset or format is not None or columns is not None):
        raise ValueError("hidden_states=True gives every column with each row's states: no format, "
                         "columns or as_dataset")
    dataset_class = _dataset_class() if as_dataset else None  # before the read: fail fast
    root = open_dataset(root)
    table = _read(root, TRAINING_SCHEMA if columns is None else _schema(columns))
    if hidden_states:
        return HiddenStateRows(root, table, lanes=lanes)
    if format is not None:
        table = _formatted(table, format, LengthCut(max_length, policy or "") if max_length else None)
    return dataset_class(table) if dataset_class is not None else table


def _dataset_class() -> Any:
    try:
        from datasets import Dataset
    except ImportError:
        raise ConfigError(f"eaglefeed.load(..., as_dataset=True) needs the datasets package: "
                          f"{DATASETS_HINT}") from None
    return Dataset


def _schema(columns: Sequence[str]) -> pa.Schema:
    return pa.schema([TRAINING_SCHEMA.field(name) for name in columns], metadata=TRAINING_SCHEMA.metadata)


def _read(root: Path, schema: pa.Schema) -> pa.Table:
    """Every live file, conformed to ``schema``, in the manifest's order (none deleted while read)."""
    with snapshot(root) as files:
        return read_table(files, schema)


def _formatted(table: pa.Table, fmt: str, cut: LengthCut | None) -> pa.Table:
    """The export format's columns (renamed as export names them), rows cut as export cuts them."""
    if cut is not None:
        table = _cut(table, cut)
    else:
        _warn_framework_cut(table, fmt)
    names = FORMATS[fmt]
    return table.select(list(names)).rename_columns([RENAMED.get(n, n) for n in names])


def _cut(table: pa.Table, cut: LengthCut) -> pa.Table:
    """Rows longer than ``cut.max_length`` dropped or truncated (mask alike); ``error`` refuses them."""
    ids, seq, prompt = (table.column(n).to_pylist() for n in ("id", "seq_len", "prompt_len"))
    keep = np.array([cut.apply(i, s, p) for i, s, p in zip(ids, seq, prompt, strict=True)], np.int64)
    if cut.policy == "error" and cut.over:
        raise DatasetError(f"{cut.over} rows are longer than max_length {cut.max_length} (first: "
                           f"{', '.join(cut.first_over)}); policy='drop' or 'truncate', or a larger "
                           "max_length")
    kept = keep > 0
    out = table.filter(pa.array(kept))
    lengths = keep[kept]
    columns = {name: _head(table.column(name).combine_chunks(), keep) for name in ("input_ids", "loss_mask")}
    columns["seq_len"] = pa.array(lengths, pa.int32())
    for name, values in columns.items():
        out = out.set_column(out.schema.get_field_index(name), TRAINING_SCHEMA.field(name), values)
    return out


def _head(lists: pa.ListArray, keep: np.ndarray) -> pa.ListArray:
    """The first ``keep[i]`` values of each list, the lists with ``keep`` 0 left out (vectorized)."""
    starts = lists.offsets.to_numpy()[:-1].astype(np.int64)[keep > 0]
    lengths = keep[keep > 0]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # index of every kept value in the child array: its list's start, plus its place in the list
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), lists.values.take(pa.array(index)),
                                    type=lists.type)


def _warn_framework_cut(table: pa.Table, fmt: str) -> None:
    """Say, as ``export`` does, how many rows the framework's own default length will cut."""
    limit = FRAMEWORK_MAX_LENGTH[fmt]
    over = pc.sum(pc.greater(table.column("seq_len"), limit)).as_py() or 0
    if over:
        log.warning("%d rows are longer than %s's default %s %d: it will truncate them and silently drop "
                    "those left with no loss token; choose with max_length=L, policy='drop' or "
                    "'truncate', and give %s the same L", over, fmt, FRAMEWORK_FLAG[fmt], limit,
                    FRAMEWORK_FLAG[fmt])
