"""Training rows in Parquet: the row schema, atomic segment files and the manifest.

A dataset directory holds ``segments/*.parquet`` and ``manifest.jsonl``. The manifest is an
append-only log; a segment belongs to the dataset only once its manifest line is written
and fsynced. Anything else in ``segments/`` (temp files, files renamed just before a crash)
is removed when the sink opens the directory, and its records are read again from Kafka.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
MANIFEST = "manifest.jsonl"
SEGMENTS = "segments"

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
    ("endpoint", pa.string()),
    ("worker_id", pa.string()),
    ("source", pa.string()),
    ("source_row", pa.string()),
    ("turn_index", pa.int32()),
    ("has_reasoning", pa.bool_()),
    ("has_tool_call", pa.bool_()),
    ("latency_seconds", pa.float64()),
    ("created_at", pa.timestamp("ms", tz="UTC")),
], metadata={"eaglefeed.schema_version": str(SCHEMA_VERSION)})

_COPIED = ("id", "prompt_id", "sample_index", "finish_reason", "prompt_tokens",
           "completion_tokens", "cached_tokens", "sampling_params", "chat_template_kwargs",
           "model_path", "tokenizer_id", "tokenizer_hash", "chat_template_hash",
           "engine_version", "endpoint", "worker_id", "source", "source_row", "turn_index",
           "latency_seconds", "created_at")


@dataclass(frozen=True)
class Markers:
    """Token ids that flag reasoning and tool calls in an output (None when unknown)."""

    think: int | None = None
    tool_call: int | None = None


def rows_to_table(records: Sequence[dict[str, Any]], markers: Sequence[Markers]) -> pa.Table:
    """Turn GenerationRecords into a table of training rows (prompt + output ids, 0/1 mask)."""
    ids = array("i")
    mask = array("b")
    offsets = array("i", [0])
    prompt_len, seq_len, reasoning, tool = [], [], [], []
    for rec, mark in zip(records, markers, strict=True):
        prompt, output = rec["prompt_ids"], rec["output_ids"]
        ids.extend(prompt)
        ids.extend(output)
        mask.extend(bytes(len(prompt)))
        mask.extend(b"\x01" * len(output))
        offsets.append(len(ids))
        prompt_len.append(len(prompt))
        seq_len.append(len(prompt) + len(output))
        reasoning.append(None if mark.think is None else mark.think in output)
        tool.append(None if mark.tool_call is None else mark.tool_call in output)
    offs = pa.array(offsets, pa.int32())
    columns: dict[str, Any] = {name: [r[name] for r in records] for name in _COPIED}
    columns["matched_stop"] = [None if r["matched_stop"] is None else json.dumps(r["matched_stop"])
                               for r in records]
    columns["input_ids"] = pa.ListArray.from_arrays(offs, pa.array(ids, pa.int32()))
    columns["loss_mask"] = pa.ListArray.from_arrays(offs, pa.array(mask, pa.int8()))
    columns["prompt_len"] = prompt_len
    columns["seq_len"] = seq_len
    columns["has_reasoning"] = reasoning
    columns["has_tool_call"] = tool
    return pa.Table.from_pydict({f.name: columns[f.name] for f in TRAINING_SCHEMA},
                                schema=TRAINING_SCHEMA)


def write_segment(root: Path, name: str, table: pa.Table) -> dict[str, Any]:
    """Write ``table`` to ``segments/<name>`` atomically: temp file, fsync, rename, fsync dir.

    Returns:
        the file's manifest facts: path relative to ``root``, rows, bytes, sha256.
    """
    seg_dir = root / SEGMENTS
    seg_dir.mkdir(parents=True, exist_ok=True)
    final = seg_dir / name
    tmp = seg_dir / f".{name}.tmp"
    pq.write_table(table, tmp, compression="zstd", row_group_size=max(1, min(len(table), 8192)))
    digest = hashlib.sha256()
    with open(tmp, "rb+") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(seg_dir)
    return {"path": f"{SEGMENTS}/{name}", "rows": len(table), "bytes": final.stat().st_size,
            "sha256": digest.hexdigest(), "schema_version": SCHEMA_VERSION}


def append_manifest(root: Path, entry: dict[str, Any]) -> None:
    """Append one event to the manifest and fsync it: this is the dataset's commit point."""
    entry = {**entry, "at": int(time.time() * 1000)}
    with _locked(root):
        with open(root / MANIFEST, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def read_manifest(root: Path) -> list[dict[str, Any]]:
    """The manifest's events in order (a torn last line from a crash is ignored)."""
    path = root / MANIFEST
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def live_segments(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Replay the manifest: segment path → its entry, for segments currently in the dataset."""
    live: dict[str, dict[str, Any]] = {}
    for event in events:
        for path in event.get("removed", []):
            live.pop(path, None)
        for seg in event.get("added", []):
            live[seg["path"]] = seg
    return live


def resume_offsets(events: list[dict[str, Any]]) -> dict[str, int]:
    """Per ``topic:partition``, the next offset to read (one past the highest written)."""
    nxt: dict[str, int] = {}
    for event in events:
        for key, (_first, last) in event.get("offsets", {}).items():
            nxt[key] = max(nxt.get(key, 0), last + 1)
    return nxt


def segment_name(topic: str, partition: int, first: int, last: int) -> str:
    """The file name of a segment: topic, partition and the offset range it holds."""
    return f"{segment_prefix(topic, partition)}{first:020d}-{last:020d}.parquet"


def segment_prefix(topic: str, partition: int) -> str:
    """The name prefix shared by every segment of one input partition."""
    return f"{topic}-p{partition:04d}-"


def discard_uncommitted(root: Path, live: dict[str, dict[str, Any]], prefix: str) -> list[str]:
    """Delete files named ``prefix*`` (or ``.prefix*``) the manifest does not list."""
    seg_dir = root / SEGMENTS
    removed = []
    if seg_dir.exists():
        for path in seg_dir.iterdir():
            rel = f"{SEGMENTS}/{path.name}"
            if path.name.lstrip(".").startswith(prefix) and rel not in live:
                path.unlink()
                removed.append(rel)
    return removed


def read_ids(root: Path, paths: Iterable[str]) -> Iterator[str]:
    """Every row id in the segments ``paths`` (relative to ``root``)."""
    for rel in paths:
        table = pq.read_table(root / rel, columns=["id"])
        yield from table.column("id").to_pylist()


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
