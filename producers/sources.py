"""Prompt inputs → rows: JSONL, JSON arrays, Parquet, stdin and folders of them.

Readers yield :class:`SourceRow` items interleaved with :class:`Mark` items. A mark says how far
one input has been read (every row before it was yielded) as a :class:`Position` with the sha256
of the bytes read; the progress ledger stores marks once the rows before them are acknowledged by
Kafka, and the progress bar counts their bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.position import TAIL, Hasher, Position, hash_prefix
from eaglefeed.producers.settings import (
    NO_OVERRIDES,
    SIDECAR_SUFFIX,
    FileOverrides,
    load_overrides,
    sidecar_names,
)

STDIN = "-"
STDIN_SOURCE = "<stdin>"
SUFFIX_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}
PARQUET_COLUMNS = ("id", "messages", "conversations", "tools", "system", "sampling_params",
                   "chat_template_kwargs")
MARK_EVERY = 256  # lines between progress marks within one read (a stop reads on to the next)
DEAD_LETTER_VALUE_CAP = 65536


@dataclass(slots=True)
class SourceRow:
    """One input row: the raw JSONL line, or an already decoded value (JSON array, Parquet)."""

    source: str
    line: int
    raw: bytes | None
    value: Any = None
    overrides: FileOverrides = NO_OVERRIDES


@dataclass(frozen=True)
class Unreadable:
    """The value of a row the reader could not decode (InputError itself does not pickle)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Mark:
    """Input ``key`` has been read up to ``state``; ``nbytes`` were consumed since the last mark.

    ``tail`` holds the last bytes before the mark (JSONL), compared between ``--follow`` rounds.
    """

    key: str
    state: Position
    nbytes: int
    tail: bytes = field(default=b"", compare=False)


@dataclass(frozen=True)
class InputFile:
    """An input file and its format (``jsonl``, ``json`` or ``parquet``)."""

    path: Path
    kind: str
    overrides: FileOverrides = field(default=NO_OVERRIDES, compare=False)

    @property
    def key(self) -> str:
        """The ledger key: the absolute path."""
        return str(self.path)

    @property
    def source(self) -> str:
        """The name recorded in PromptRecords and dead letters (always valid UTF-8)."""
        return os.fsencode(self.path).decode("utf-8", "replace")


def discover(inputs: Sequence[str], *, missing_ok: bool = False) -> list[InputFile]:
    """The input files named by ``inputs`` (files and folders, searched recursively), in order.

    Folders contribute files ending in .jsonl, .ndjson, .json or .parquet, except hidden files and
    ``*.overrides.json`` sidecars; a named file of another suffix is read as JSONL.

    Raises:
        ConfigError: when an input does not exist (unless ``missing_ok``) or a sidecar is bad.
    """
    files: dict[Path, InputFile] = {}
    for name in inputs:
        if name == STDIN:
            continue
        path = Path(name).absolute()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if _is_input(p, path))
        elif path.is_file():
            found = [path]
        elif missing_ok:
            continue
        else:
            raise ConfigError(f"input {name!r} does not exist")
        for p in found:
            if p not in files:
                files[p] = InputFile(path=p, kind=SUFFIX_KINDS.get(p.suffix.lower(), "jsonl"),
                                     overrides=load_overrides(p))
    return list(files.values())


def unused_overrides(inputs: Sequence[str], *, files: Sequence[InputFile]) -> list[Path]:
    """Overrides files in the input folders (or beside the named inputs) that belong to no input.

    Such a file is most likely misnamed, and its rows would silently run with the defaults.

    Args:
        inputs: files, folders and ``-``, as given.
        files: what :func:`discover` found for ``inputs``.
    """
    used = {name for f in files for name in sidecar_names(f.path)}
    folders = {Path(name).absolute() for name in inputs if name != STDIN and Path(name).is_dir()}
    found: set[Path] = set()
    for folder in folders:
        found.update(p for p in folder.rglob("*" + SIDECAR_SUFFIX)
                     if not any(part.startswith(".") for part in p.relative_to(folder).parts))
    for f in files:  # a named file's sidecar under another spelling (``arr.jsonl.overrides.json`` ...)
        found.update(p for p in f.path.parent.glob(f.path.name.split(".")[0] + "*" + SIDECAR_SUFFIX))
    return sorted(p for p in found if p not in used and p.is_file())


def read_jsonl(file: InputFile, *, offset: int = 0, line: int = 0, hasher: Hasher | None = None,
               final: bool = True) -> Iterator[SourceRow | Mark]:
    """Rows of a JSONL file from byte ``offset`` (after ``line`` lines) to its end.

    A last line without a newline is read only when ``final`` (the file is complete); otherwise
    it waits for the rest of the line.

    Args:
        file: the input.
        offset: where to start reading (the end of a line).
        line: lines before ``offset``.
        hasher: the sha256 of the first ``offset`` bytes, updated as lines are read (hashed here
            when omitted).
        final: the file is complete.
    """
    if hasher is None:
        hasher = hash_prefix(file.path, size=offset) or hashlib.sha256()
    with open(file.path, "rb") as fh:
        fh.seek(offset)
        start, tail = offset, b""
        for raw in fh:
            if not raw.endswith(b"\n") and not final:
                break
            line += 1
            offset += len(raw)
            hasher.update(raw)
            tail = raw[-TAIL:]
            if raw.strip():
                yield SourceRow(file.source, line, raw.rstrip(b"\r\n"), overrides=file.overrides)
            if line % MARK_EVERY == 0:
                yield Mark(file.key, Position(offset, line, hasher.hexdigest()), offset - start, tail)
                start = offset
    if offset != start:
        yield Mark(file.key, Position(offset, line, hasher.hexdigest()), offset - start, tail)


def read_whole(file: InputFile) -> Iterator[SourceRow | Mark]:
    """Rows of a JSON array or Parquet file, then a mark with its size, row count and sha256.

    A ``.json`` file that does not start with ``[`` is read as JSON Lines.
    """
    if file.kind == "json":
        data = file.path.read_bytes()
        size, digest = len(data), hashlib.sha256(data).hexdigest()
        if data.lstrip()[:1] == b"[":
            rows = _array_rows(data, file.source)
        else:
            rows = (SourceRow(file.source, n, raw.rstrip(b"\r"))
                    for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip())
    else:
        # Hashed before it is read: a file replaced in between is read new under the old digest,
        # so the next run reads it again rather than skipping it.
        size, hashed = file.path.stat().st_size, hash_prefix(file.path)
        digest = hashed.hexdigest() if hashed is not None else ""
        rows = (SourceRow(file.source, n, None, value) for n, value in _parquet_rows(file.path))
    count = 0
    for row in rows:
        row.overrides = file.overrides
        count = row.line
        yield row
    yield Mark(file.key, Position(size, count, digest), size)


def read_stdin(stream: IO[bytes] | None = None) -> Iterator[SourceRow]:
    """Rows from standard input: JSONL, or one JSON array when the input starts with ``[``."""
    stream = stream or sys.stdin.buffer
    for line, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        if raw.lstrip().startswith(b"["):
            yield from _array_rows(raw + stream.read(), STDIN_SOURCE)
            return
        yield SourceRow(STDIN_SOURCE, line, raw.rstrip(b"\r\n"))


def _is_input(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    return (path.suffix.lower() in SUFFIX_KINDS and not path.name.endswith(SIDECAR_SUFFIX)
            and not any(part.startswith(".") for part in rel.parts) and path.is_file())


def _array_rows(data: bytes, source: str) -> Iterator[SourceRow]:
    """One row per element of a JSON array (numbered from 1); a file that is not one is one bad row."""
    line = 1
    try:
        values = json.loads(data)
    except UnicodeDecodeError as exc:
        error = Unreadable("invalid_utf8", f"{source} is not valid UTF-8: {exc}")
    except (json.JSONDecodeError, RecursionError) as exc:
        line = getattr(exc, "lineno", 1)
        error = Unreadable("invalid_json", f"{source} is not a valid JSON array: {exc}")
    else:
        if isinstance(values, list):
            for n, value in enumerate(values, start=1):
                yield SourceRow(source, n, None, value)
            return
        error = Unreadable("wrong_type", f"{source} must hold a JSON array of rows")
    yield SourceRow(source, line, data[:DEAD_LETTER_VALUE_CAP], error)


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    line = 0
    try:
        parquet = pq.ParquetFile(path)
        columns = [c for c in PARQUET_COLUMNS if c in parquet.schema_arrow.names]
        for batch in parquet.iter_batches(batch_size=1024, columns=columns):
            for row in batch.to_pylist():
                line += 1
                yield line, _without_nulls(row)
    except (OSError, pa.ArrowException) as exc:
        yield line + 1, Unreadable("invalid_parquet", f"cannot read {path} after row {line}: {exc}")


def _without_nulls(value: Any) -> Any:
    # Parquet structs hold every field of every row, absent ones as null: drop them again.
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
