"""Training rows in Parquet: the row schema, building tables from decoded batches, atomic files.

A file becomes part of the dataset in two steps: it is written to a temp name, fsynced and
renamed into ``segments/`` (:func:`write_segment`), then listed in the manifest
(``eaglefeed.dataset.manifest``). Files in ``segments/`` that the manifest never listed were renamed
just before a crash; their rows are read again from Kafka, and :func:`discard_uncommitted`
removes them when their partition is next opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eaglefeed.dataset.manifest import (  # noqa: F401 - re-exported: readers know them as shards.*
    MANIFEST,
    append_manifest,
    ever_added,
    live_segments,
    read_manifest,
    resume_offsets,
)
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.dataset.store.mirror import mirror_of
from eaglefeed.schemas.columnar import GenerationBatch

# The row schema's version, in each file's metadata and manifest entry. 2 added ``engine``;
# 3 added ``conversation_id``, ``history_mode`` and ``lane`` (regenerated conversations). Older
# files still read, and rows copied from them (compaction) get ``history_mode = original`` and
# nulls in the other newer columns, as a new original-history row has. 4 added ``capped_at``,
# ``weight_version`` and ``seeded`` (GenerationRecord v4; null in rows of older records). 5 added
# ``hidden_states``: the reference to the row's states in the dataset's store (null: none captured).
SCHEMA_VERSION = 5
SEGMENTS = "segments"
FREQ = "freq"  # each segment's loss-token counts (eaglefeed.dataset.freq)
HIDDEN_STATES_TYPE = pa.struct([
    ("uri", pa.string()), ("bytes", pa.int64()), ("sha256", pa.string()), ("shape", pa.list_(pa.int32())),
    ("dtype", pa.string()), ("layer_ids", pa.list_(pa.int32())), ("last_layer", pa.string()),
    ("start", pa.int32()),
])
"""A row's ``hidden_states``: GenerationRecord v5's reference (``eaglefeed.dataset.hidden_states``)."""

TRAINING_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("prompt_id", pa.string()),
    ("sample_index", pa.int32()),
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.int8())),
    ("prompt_len", pa.int32()),
    ("seq_len", pa.int32()),
    ("finish_reason", pa.string()),
    ("matched_stop", pa.string()),
    ("prompt_tokens", pa.int32()),
    ("completion_tokens", pa.int32()),
    ("cached_tokens", pa.int32()),
    ("sampling_params", pa.string()),
    ("chat_template_kwargs", pa.string()),
    ("model_path", pa.string()),
    ("tokenizer_id", pa.string()),
    ("tokenizer_hash", pa.string()),
    ("chat_template_hash", pa.string()),
    ("engine_version", pa.string()),
    ("engine", pa.string()),
    ("endpoint", pa.string()),
    ("worker_id", pa.string()),
    ("source", pa.string()),
    ("source_row", pa.string()),
    ("source_id", pa.string()),  # the row's own id (its ``id`` field; else its line number)
    ("turn_index", pa.int32()),
    ("conversation_id", pa.string()),  # regenerated conversations: the conversation's stable id, else null
    ("history_mode", pa.string()),  # rerender, tokens, or original (the dataset's own earlier turns)
    ("lane", pa.int32()),  # the sample chain a regenerated turn belongs to; null for original history
    ("has_reasoning", pa.bool_()),
    ("has_tool_call", pa.bool_()),
    ("latency_seconds", pa.float64()),
    ("created_at", pa.timestamp("ms", tz="UTC")),
    ("capped_at", pa.int32()),  # the engine's own output cap (--on-capped keep), else null
    ("weight_version", pa.string()),  # the weights that generated the row, when the engine says
    ("seeded", pa.bool_()),  # whether the engine honoured sampling_seed; null when unknown
    ("hidden_states", HIDDEN_STATES_TYPE),  # the row's states in hidden_states/ (null: none captured)
], metadata={"eaglefeed.schema_version": str(SCHEMA_VERSION)})

_COPIED = ("id", "prompt_id", "sample_index", "finish_reason", "prompt_tokens",
           "completion_tokens", "cached_tokens", "sampling_params", "chat_template_kwargs",
           "model_path", "tokenizer_id", "tokenizer_hash", "chat_template_hash",
           "engine_version", "endpoint", "worker_id", "source", "source_row", "turn_index",
           "latency_seconds", "created_at")
# Repetitive strings compress well as dictionaries; the id lists do not (trying costs time).
_DICTIONARY = ["finish_reason", "matched_stop", "chat_template_kwargs", "model_path", "tokenizer_id",
               "tokenizer_hash", "chat_template_hash", "engine_version", "engine", "endpoint", "worker_id",
               "source", "history_mode", "weight_version"]
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": _DICTIONARY,
    "write_statistics": [n for n in TRAINING_SCHEMA.names if n not in ("input_ids", "loss_mask")],
    # a 0…0 1…1 mask delta-encodes to almost nothing before zstd sees it
    "column_encoding": {"loss_mask.list.element": "DELTA_BINARY_PACKED"},
}


def batch_to_table(batch: GenerationBatch, markers: Mapping[str, FlagMarkers] | None = None) -> pa.Table:
    """Training rows of a decoded batch: prompt + output ids, a 0/1 mask, flags from ``markers``.

    Args:
        batch: decoded GenerationRecords.
        markers: tokenizer id → its marker ids; a tokenizer missing here leaves the flags null.
    """
    rows = batch.rows
    offsets = batch.offsets
    lengths = np.diff(offsets)
    mask = np.repeat(np.tile(np.array([0, 1], np.int8), len(rows)),
                     np.stack([batch.prompt_len, batch.output_len], axis=1).reshape(-1))
    list_offsets = pa.array(offsets.astype(np.int32))
    columns: dict[str, Any] = {name: [r[name] for r in rows] for name in _COPIED}
    columns["engine"] = [r.get("engine") or None for r in rows]  # null: unknown (v1 records)
    for name in ("capped_at", "weight_version", "seeded", "hidden_states"):  # v4 and v5; null before
        columns[name] = [r.get(name) for r in rows]
    columns["matched_stop"] = [None if r["matched_stop"] is None else json.dumps(r["matched_stop"])
                               for r in rows]
    columns["input_ids"] = pa.ListArray.from_arrays(list_offsets, pa.array(batch.tokens))
    columns["loss_mask"] = pa.ListArray.from_arrays(list_offsets, pa.array(mask))
    columns["prompt_len"] = pa.array(batch.prompt_len)
    columns["seq_len"] = pa.array(lengths.astype(np.int32))
    columns["has_reasoning"], columns["has_tool_call"] = _flags(batch, mask, lengths, markers or {})
    columns["source_id"] = columns["source_row"]  # the user's row id, by the name exports use
    columns["conversation_id"], columns["history_mode"], columns["lane"] = _conversations(rows)
    return pa.Table.from_pydict({f.name: columns[f.name] for f in TRAINING_SCHEMA}, schema=TRAINING_SCHEMA)


def write_segment(root: Path, name: str, table: pa.Table) -> dict[str, Any]:
    """Write ``table`` to ``segments/<name>`` atomically: temp file, fsync, rename, fsync dir.

    Returns:
        the file's manifest entry: path relative to ``root``, rows, bytes, sha256, schema
        version, tokens, loss tokens and data bytes (column chunks without the footer, what
        the file adds to a compacted shard).
    """
    with ParquetFile(root, name) as out:
        out.write(table)
    return out.entry


def stage_segment(root: Path, name: str, table: pa.Table) -> ParquetFile:
    """Write ``table`` to the temp file of ``segments/<name>`` and fsync it; ``publish()`` renames it.

    The sink renames under the manifest's write lock, once its fence passed (``consumers/sink/writer.py``).
    """
    out = ParquetFile(root, name)
    try:
        out.write(table)
        out.stage()
    except BaseException:
        out.abort()
        raise
    return out


class ParquetFile:
    """A Parquet file written in pieces to a temp name; ``close()`` fsyncs and renames it.

    Use as a context manager: leaving the block by an exception removes the temp file.
    """

    def __init__(self, root: Path, name: str, *, folder: str = SEGMENTS,
                 schema: pa.Schema = TRAINING_SCHEMA) -> None:
        self.root = Path(root)
        self.dir = self.root / folder
        self.dir.mkdir(parents=True, exist_ok=True)
        self.final = self.dir / name
        self.tmp = self.dir / temp_name(name)
        options = WRITE_OPTIONS if schema is TRAINING_SCHEMA else {"compression": "zstd"}
        self._writer = pq.ParquetWriter(self.tmp, schema, **options)
        self.rows = self.tokens = self.loss_tokens = 0
        self.entry: dict[str, Any] = {}

    def write(self, table: pa.Table) -> None:
        """Append ``table`` as one or more row groups (rows of an older row schema are upgraded)."""
        if table.num_rows:
            table = conform(table, self._writer.schema)
            self._writer.write_table(table, row_group_size=max(1, table.num_rows))
            self.rows += table.num_rows
            if "seq_len" in table.column_names:
                seq = int(pc.sum(table.column("seq_len")).as_py() or 0)
                prompt = int(pc.sum(table.column("prompt_len")).as_py() or 0)
                self.tokens += seq
                self.loss_tokens += seq - prompt

    def close(self) -> dict[str, Any]:
        """Finish, fsync, hash and rename the file into place; returns its manifest entry."""
        self.stage()
        self.publish()
        return self.entry

    def stage(self) -> dict[str, Any]:
        """Finish, hash and fsync the temp file, without renaming it; returns its manifest entry."""
        self._writer.close()
        footer = pq.read_metadata(self.tmp)
        data_bytes = sum(footer.row_group(g).column(c).total_compressed_size
                         for g in range(footer.num_row_groups) for c in range(footer.num_columns))
        digest = hashlib.sha256()
        with open(self.tmp, "rb+") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                digest.update(chunk)
            os.fsync(fh.fileno())
        self.entry = {"path": f"{self.dir.name}/{self.final.name}", "rows": self.rows,
                      "bytes": self.tmp.stat().st_size, "sha256": digest.hexdigest(),
                      "schema_version": SCHEMA_VERSION, "tokens": self.tokens,
                      "loss_tokens": self.loss_tokens, "data_bytes": data_bytes}
        return self.entry

    def publish(self) -> None:
        """Rename the staged file into place (durably)."""
        os.replace(self.tmp, self.final)
        fsync_dir(self.dir)

    def discard(self) -> None:
        """Remove the staged file (it is not to be published)."""
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> ParquetFile:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def abort(self) -> None:
        """Stop writing and remove the temp file."""
        self._writer.close()
        self.tmp.unlink(missing_ok=True)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s column order, with the columns added since it was written.

    A missing column is null, except ``source_id``, which older files hold as ``source_row``, and
    ``history_mode``: rows written before schema 3 are original-history rows, labelled ``original``
    as a new such row is (with ``conversation_id`` and ``lane`` null, as there).
    """
    if table.schema.names == schema.names:
        return table
    columns = [table.column(f.name) if f.name in table.column_names
               else table.column("source_row") if f.name == "source_id" and "source_row" in table.column_names
               else pa.array(["original"] * table.num_rows, f.type) if f.name == "history_mode"
               else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def segment_name(topic: str, partition: int, first: int, last: int) -> str:
    """The file name of a sink segment: topic, partition and the offset range it holds."""
    return f"{segment_prefix(topic, partition)}{first:020d}-{last:020d}.parquet"


def segment_prefix(topic: str, partition: int) -> str:
    """The name prefix shared by every segment of one input partition."""
    return f"{topic}-p{partition:04d}-"


def discard_uncommitted(root: Path, added: Collection[str], prefix: str | Sequence[str]) -> list[str]:
    """Delete files named ``prefix*`` (or temp files ``.prefix*``) that the manifest never listed.

    Their loss-token sidecars (``freq/``) go with them. In a dataset whose home is an object store,
    the store's copies go too: a commit that failed after uploading a segment, before its event's
    put, left them there (``eaglefeed.dataset.store.mirror.Mirror.publish``). One listing of each
    folder serves every prefix.

    Args:
        root: the dataset directory.
        added: every path the manifest ever listed (:func:`consumers.manifest.ever_added`);
            files compacted away are left to compaction, which deletes them when no reader
            holds the dataset open.
        prefix: the segment name prefix of one partition, or several.
    """
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    if not prefixes:
        return []

    def never_listed(rel: str) -> bool:
        folder, _, name = rel.partition("/")
        name = name.lstrip(".")
        if not name.startswith(prefixes):
            return False
        if folder == FREQ:  # a sidecar: listed with its segment, same stem
            name = name.split(".npz", 1)[0] + ".parquet"
        return f"{SEGMENTS}/{name}" not in added

    removed = []
    for folder in (SEGMENTS, FREQ):
        base = Path(root) / folder
        for path in base.iterdir() if base.is_dir() else ():
            rel = f"{folder}/{path.name}"
            if never_listed(rel):
                path.unlink(missing_ok=True)
                removed.append(rel)
    remote = mirror_of(Path(root))
    if remote is not None:
        for folder in (SEGMENTS, FREQ):
            for rel in [rel for rel in remote.store.paths(folder) if never_listed(rel)]:
                remote.delete(rel)
                if rel not in removed:
                    removed.append(rel)
    return removed


def temp_name(name: str) -> str:
    """A temp name for ``name`` that no other writer uses.

    Two sinks can stage the same segment (a paused member and the partition's next owner read the
    same offsets); one must never truncate, rename or discard the other's file.
    """
    return f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _conversations(rows: list[dict[str, Any]]) -> tuple[list[str | None], list[str], list[int | None]]:
    """conversation_id / history_mode / lane per row, from the record's conversation state (if any).

    A turn-0 prompt is shared by every lane (``num_samples = n``): its sample ``s`` starts lane ``s``.
    """
    ids: list[str | None] = []
    modes: list[str] = []
    lanes: list[int | None] = []
    for r in rows:
        cid, mode, lane = _conversation_columns(r)
        ids.append(cid)
        modes.append(mode)
        lanes.append(lane)
    return ids, modes, lanes


def _conversation_columns(row: dict[str, Any]) -> tuple[str | None, str, int | None]:
    text = row.get("conversation")
    try:
        state = json.loads(text) if text else None
    except (ValueError, RecursionError):
        state = None  # a state the converse stage cannot read either: the row is kept, unlabelled
    if not isinstance(state, dict) or not isinstance(state.get("conversation_id"), str):
        return None, "original", None
    lane = row["sample_index"] if state.get("turn_index") == 0 else state.get("lane")
    return state["conversation_id"], str(state.get("mode")), lane if isinstance(lane, int) else None


def _flags(batch: GenerationBatch, mask: np.ndarray, lengths: np.ndarray,
           markers: Mapping[str, FlagMarkers]) -> tuple[list[bool | None], list[bool | None]]:
    """has_reasoning / has_tool_call per row: a marker id among the output ids (null if unknown)."""
    n = len(batch.rows)
    reasoning: list[bool | None] = [None] * n
    tool: list[bool | None] = [None] * n
    tokenizer = np.array([r["tokenizer_id"] for r in batch.rows], dtype=object)
    starts = batch.offsets[:-1]
    for tok_id, mark in markers.items():
        rows = np.flatnonzero(tokenizer == tok_id)
        if rows.size == 0:
            continue
        for ids, out in ((mark.reasoning, reasoning), (mark.tool_call, tool)):
            if ids is None:
                continue
            hit = np.isin(batch.tokens, np.asarray(ids, np.int32)) & (mask == 1)
            per_row = np.add.reduceat(np.append(hit, False), starts) if n else np.zeros(0)
            for r in rows.tolist():
                out[r] = bool(per_row[r]) and bool(lengths[r])
        if mark.reasoning_sequence:
            hit = _sequence_hits(batch.tokens, mask, mark.reasoning_sequence)
            per_row = np.add.reduceat(np.append(hit, False), starts) if n else np.zeros(0)
            for r in rows.tolist():
                reasoning[r] = bool(reasoning[r]) or (bool(per_row[r]) and bool(lengths[r]))
    return reasoning, tool


def _sequence_hits(tokens: np.ndarray, mask: np.ndarray, sequence: tuple[int, ...]) -> np.ndarray:
    """Where ``sequence`` starts in ``tokens`` with every one of its ids on the output (mask 1)."""
    hit = np.zeros(len(tokens), dtype=bool)
    size = len(sequence)
    if len(tokens) < size:
        return hit
    window = np.ones(len(tokens) - size + 1, dtype=bool)
    for k, token in enumerate(sequence):
        window &= (tokens[k:len(tokens) - size + 1 + k] == token) & (mask[k:len(tokens) - size + 1 + k] == 1)
    hit[:len(window)] = window
    return hit
