"""Decode GenerationRecords straight into token columns, without a Python int per token.

``schemas.GENERATION.decode`` turns every token id into a Python int, which costs more than
writing the row to Parquet. Two fast paths, chosen by the writer fingerprint:

- v2 and later pack ids as little-endian int32 bytes: fastavro reads each record with its
  writer schema (the ids come out as two ``bytes`` objects) and numpy views them, no int per
  token; fields added after the writer's version get their defaults (v3's ``conversation``).
- v1 wrote Avro int arrays: fastavro decodes the scalar field runs before, between and after
  the two arrays, and numpy the arrays: a chunk of messages is scanned once for varint ends,
  and only the varints inside the arrays become int32 values; fields added since v1 get
  their defaults, as Avro resolution would give them.

Any other message goes through the codec. The result is exactly what the codec returns (a
property test checks it), except that a v1 id whose varint is longer than a 32-bit int needs
is rejected where fastavro would accept it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import fastavro
import numpy as np

from eaglefeed.core.errors import CorruptRecordError, SchemaError
from eaglefeed.schemas import GENERATION, history, schema_fingerprint
from eaglefeed.schemas.batch import INT32_MAX, INT32_MIN, TOKEN_FIELDS, Chunk, GenerationBatch
from eaglefeed.schemas.codec import HEADER_LEN, INT32, MAGIC, PACKED_TYPE
from eaglefeed.schemas.varints import VarintPlan

__all__ = ["TOKEN_FIELDS", "Decoded", "GenerationBatch", "decode_generations"]

_CHUNK = 64  # messages scanned together: large enough to amortise numpy calls, small enough for cache


@dataclass
class Decoded:
    """The outcome of decoding a list of messages.

    Attributes:
        batch: the rows that decoded, in message order.
        index: for each row of ``batch``, the position of its message in the input.
        errors: ``(position, error)`` of each message that did not decode.
    """

    batch: GenerationBatch
    index: list[int]
    errors: list[tuple[int, SchemaError]]


def decode_generations(values: Sequence[bytes]) -> Decoded:
    """Decode GenerationRecord messages into a columnar batch; bad messages are reported, not raised."""
    parts: list[GenerationBatch] = []
    index: list[int] = []
    errors: list[tuple[int, SchemaError]] = []
    pending: list[int] = []

    def drain() -> None:
        if pending:
            batch, ok, bad = _decode_chunk([values[i] for i in pending])
            parts.append(batch)
            index.extend(pending[j] for j in ok)
            errors.extend((pending[j], exc) for j, exc in bad)
            pending.clear()

    for i in range(len(values)):
        pending.append(i)
        if len(pending) >= _CHUNK:
            drain()
    drain()
    return Decoded(batch=GenerationBatch.concat(parts), index=index, errors=errors)


def _slow(values: Sequence[bytes]) -> tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]:
    """Decode with the codec (any known writer schema); token lists become arrays afterwards."""
    records, ok, bad = [], [], []
    for j, value in enumerate(values):
        try:
            record = GENERATION.decode(value)
            GenerationBatch.from_records([record])
        except SchemaError as exc:
            bad.append((j, exc))
            continue
        except ValueError as exc:
            bad.append((j, CorruptRecordError(f"GenerationRecord: {exc}")))
            continue
        records.append(record)
        ok.append(j)
    return GenerationBatch.from_records(records), ok, bad

class _Packed:
    """Messages of a version that packs ids as int32 bytes: fastavro per record, numpy per chunk."""

    def __init__(self, schema: dict[str, Any], current: dict[str, Any]) -> None:
        self.schema = fastavro.parse_schema(schema)
        known = {f["name"] for f in schema["fields"]}
        # fields added since this version get their defaults, as Avro resolution would give them
        self.defaults = {f["name"]: f["default"] for f in current["fields"] if f["name"] not in known}

    def decode(self, values: Sequence[bytes]) -> Chunk:
        """Decode messages of this writer schema (header included)."""
        rows: list[dict[str, Any]] = []
        ok: list[int] = []
        bad: list[tuple[int, SchemaError]] = []
        parts: list[bytes] = []
        lens: list[int] = []
        for j, value in enumerate(values):
            stream = io.BytesIO(value)
            stream.seek(HEADER_LEN)
            try:
                row = cast("dict[str, Any]", fastavro.schemaless_reader(stream, self.schema, None))
                ids = [_packed(row.pop(name), name) for name in TOKEN_FIELDS]
                if stream.tell() != len(value):
                    raise CorruptRecordError("GenerationRecord: trailing bytes after the record body")
            except (CorruptRecordError, ValueError, TypeError, KeyError, IndexError, EOFError,
                    UnicodeDecodeError, OverflowError, MemoryError) as exc:
                bad.append((j, exc if isinstance(exc, SchemaError) else
                            CorruptRecordError(f"GenerationRecord: body does not decode: {exc}")))
                continue
            row.update(self.defaults)
            rows.append(row)
            ok.append(j)
            parts += ids
            lens += (len(ids[0]) // 4, len(ids[1]) // 4)
        tokens = np.frombuffer(b"".join(parts), INT32).astype(np.int32)  # native order, writable
        both = np.asarray(lens, np.int32).reshape(-1, 2)
        return GenerationBatch(rows=rows, prompt_len=both[:, 0].copy(), output_len=both[:, 1].copy(),
                               tokens=tokens), ok, bad


def _packed(value: Any, name: str) -> bytes:
    """The int32 bytes of a packed field (a writer may also have chosen the array branch)."""
    if isinstance(value, bytes):
        if len(value) % 4:
            raise CorruptRecordError(f"GenerationRecord: {name} is not a whole number of int32")
        return value
    arr = np.asarray(value, np.int64).reshape(-1)
    if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        raise CorruptRecordError(f"GenerationRecord: {name} holds a value outside int32")
    return arr.astype(INT32).tobytes()


Decoder = Any  # VarintPlan or _Packed: ``decode(values) -> (batch, ok, bad)``


def _decode_chunk(values: Sequence[bytes]) -> Chunk:
    """Decode a chunk, each message by the fast path of its writer version (or the codec)."""
    groups: dict[bytes, list[int]] = {}
    for j, v in enumerate(values):
        header = bytes(v[:HEADER_LEN]) if isinstance(v, bytes) and v[:HEADER_LEN] in _FAST else b""
        groups.setdefault(header, []).append(j)
    if len(groups) == 1:
        [header] = groups
        return _FAST[header].decode(values) if header else _slow(values)
    batches, sources, bad = [], [], []
    for header, idx in groups.items():
        decode = _FAST[header].decode if header else _slow
        batch, good, errs = decode([values[j] for j in idx])
        batches.append(batch)
        sources += [idx[g] for g in good]
        bad += [(idx[j], exc) for j, exc in errs]
    order = np.argsort(np.asarray(sources, np.int64), kind="stable")
    return (GenerationBatch.concat(batches).select(order), sorted(sources),
            sorted(bad, key=lambda item: item[0]))


def _fast_paths() -> dict[bytes, Decoder]:
    """A fast decoder per known writer version this module can walk; the rest use the codec."""
    versions = history("generation")
    paths: dict[bytes, Decoder] = {}
    for schema in versions:
        types = {f["name"]: f["type"] for f in schema["fields"]}
        try:
            if all(types.get(n) == PACKED_TYPE for n in TOKEN_FIELDS):
                decoder: Decoder = _Packed(schema, versions[-1])
            else:
                decoder = VarintPlan(schema, versions[-1])
        except (ValueError, KeyError):
            continue
        paths[MAGIC + schema_fingerprint(schema)] = decoder
    return paths


_FAST = _fast_paths()
