"""Decode GenerationRecords straight into token columns, without a Python int per token.

``schemas.GENERATION.decode`` turns every token id into a Python int, which costs more than
writing the row to Parquet. Two fast paths, chosen by the writer fingerprint:

- v2 (the current version) packs ids as little-endian int32 bytes: fastavro reads each
  record (the ids come out as two ``bytes`` objects) and numpy views them, no int per token.
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

from eaglefeed.errors import CorruptRecordError, SchemaError
from schemas import GENERATION, history, schema_fingerprint
from schemas.codec import HEADER_LEN, INT32, MAGIC, PACKED_TYPE

TOKEN_FIELDS = ("prompt_ids", "output_ids")
_CHUNK = 64  # messages scanned together: large enough to amortise numpy calls, small enough for cache

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass
class GenerationBatch:
    """Decoded GenerationRecords: scalar fields per row, token ids as flat int32 arrays.

    Attributes:
        rows: every field of each record except ``prompt_ids`` and ``output_ids``.
        prompt_len: number of prompt ids of each row (int32).
        output_len: number of output ids of each row (int32).
        tokens: each row's prompt ids then its output ids, rows back to back (int32).
    """

    rows: list[dict[str, Any]]
    prompt_len: np.ndarray
    output_len: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def offsets(self) -> np.ndarray:
        """Where each row starts in ``tokens`` (length ``len(self) + 1``, int64)."""
        out = np.zeros(len(self.rows) + 1, np.int64)
        np.cumsum(self.prompt_len + self.output_len.astype(np.int64), out=out[1:])
        return out

    def select(self, keep: Sequence[int] | np.ndarray) -> GenerationBatch:
        """The rows at positions ``keep``, in that order."""
        keep = np.asarray(keep, np.int64)
        if len(keep) == len(self.rows) and np.array_equal(keep, np.arange(len(keep))):
            return self  # the common case: every row stays
        offsets = self.offsets
        lengths = offsets[keep + 1] - offsets[keep]
        total = int(lengths.sum())
        starts = np.repeat(offsets[keep] - _exclusive_cumsum(lengths), lengths)
        return GenerationBatch(rows=[self.rows[i] for i in keep], prompt_len=self.prompt_len[keep],
                               output_len=self.output_len[keep],
                               tokens=self.tokens[starts + np.arange(total)])

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> GenerationBatch:
        """Build a batch from decoded record dicts (the codec's output).

        Raises:
            ValueError: a token id does not fit in int32.
        """
        rows: list[dict[str, Any]] = []
        plen: list[int] = []
        olen: list[int] = []
        parts: list[np.ndarray] = []
        for rec in records:
            rows.append({k: v for k, v in rec.items() if k not in TOKEN_FIELDS})
            for name, lens in (("prompt_ids", plen), ("output_ids", olen)):
                ids = np.asarray(rec[name], np.int64).reshape(-1)
                if ids.size and (ids.min() < INT32_MIN or ids.max() > INT32_MAX):
                    raise ValueError(f"{name} holds a value outside int32")
                lens.append(ids.size)
                parts.append(ids.astype(np.int32))
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return cls(rows=rows, prompt_len=np.asarray(plen, np.int32), output_len=np.asarray(olen, np.int32),
                   tokens=tokens)

    @classmethod
    def concat(cls, batches: Sequence[GenerationBatch]) -> GenerationBatch:
        """One batch holding the rows of ``batches`` in order."""
        if not batches:
            return cls.empty()
        return cls(rows=[row for b in batches for row in b.rows],
                   prompt_len=np.concatenate([b.prompt_len for b in batches]),
                   output_len=np.concatenate([b.output_len for b in batches]),
                   tokens=np.concatenate([b.tokens for b in batches]))

    @classmethod
    def empty(cls) -> GenerationBatch:
        """A batch without rows."""
        return cls(rows=[], prompt_len=np.zeros(0, np.int32), output_len=np.zeros(0, np.int32),
                   tokens=np.zeros(0, np.int32))


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


Chunk = tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]  # rows, their positions, failures


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


class _Plan:
    """How to walk a message of the current writer schema: field runs and the two id arrays."""

    def __init__(self, schema: dict[str, Any], current: dict[str, Any]) -> None:
        fields = schema["fields"]
        known = {f["name"] for f in fields}
        # fields added since: what Avro resolution into the current schema would fill in
        self.defaults = {f["name"]: f["default"] for f in current["fields"] if f["name"] not in known}
        self.dropped = known - {f["name"] for f in current["fields"]}
        names = [f["name"] for f in fields]
        positions = [names.index(n) for n in TOKEN_FIELDS]
        if positions != sorted(positions):
            raise ValueError("prompt_ids must come before output_ids")
        for pos in positions:
            if fields[pos]["type"] != {"type": "array", "items": "int"}:
                raise ValueError(f"{names[pos]} is not an array of int")
        # steps: a parsed sub-record schema for a run of scalar fields, or the name of an id array
        self.steps: list[Any] = []
        start = 0
        for n, pos in enumerate([*positions, len(fields)]):
            if pos > start:
                self.steps.append(fastavro.parse_schema({
                    "type": "record", "name": f"Run{n}", "namespace": "eaglefeed.sink",
                    "fields": fields[start:pos]}))
            if pos < len(fields):
                self.steps.append(names[pos])
            start = pos + 1

    def decode(self, values: Sequence[bytes]) -> Chunk:
        """Decode messages of this plan's writer schema (header included)."""
        blob = b"".join(values)
        arr = np.frombuffer(blob, np.uint8)
        ends = np.flatnonzero(arr < 0x80)  # the last byte of every varint (and of much else)
        stream = io.BytesIO(blob)
        rows: list[dict[str, Any]] = []
        ok: list[int] = []
        bad: list[tuple[int, SchemaError]] = []
        first_varint: list[int] = []  # per id block: index in ``ends`` of its first item
        counts: list[int] = []
        lens: list[tuple[int, int]] = []
        base = 0
        for j, value in enumerate(values):
            stop = base + len(value)
            mark = len(counts)
            try:
                row, plen, olen = self._walk(stream, blob, ends, base + HEADER_LEN, stop,
                                             first_varint, counts)
            except (CorruptRecordError, ValueError, TypeError, KeyError, IndexError, EOFError,
                    UnicodeDecodeError, OverflowError, MemoryError,
                    fastavro.read.SchemaResolutionError) as exc:
                del first_varint[mark:], counts[mark:]
                bad.append((j, exc if isinstance(exc, SchemaError) else
                            CorruptRecordError(f"GenerationRecord: body does not decode: {exc}")))
            else:
                rows.append(row)
                ok.append(j)
                lens.append((plen, olen))
            base = stop
        tokens, broken = _varints(arr, ends, np.asarray(first_varint, np.int64), np.asarray(counts, np.int64))
        plen_arr = np.asarray([p for p, _ in lens], np.int32)
        olen_arr = np.asarray([o for _, o in lens], np.int32)
        batch = GenerationBatch(rows=rows, prompt_len=plen_arr, output_len=olen_arr, tokens=tokens)
        if broken.any():  # an id that is not a 32-bit Avro int: drop its row, report the message
            row_of = np.repeat(np.arange(len(batch)), np.diff(batch.offsets))
            bad_rows = set(row_of[broken].tolist())
            bad += [(ok[r], CorruptRecordError("GenerationRecord: a token id is not a 32-bit int"))
                    for r in sorted(bad_rows)]
            keep = [r for r in range(len(batch)) if r not in bad_rows]
            batch, ok = batch.select(keep), [ok[r] for r in keep]
            bad.sort(key=lambda item: item[0])
        return batch, ok, bad

    def _walk(self, stream: io.BytesIO, blob: bytes, ends: np.ndarray, pos: int, stop: int,
              first_varint: list[int], counts: list[int]) -> tuple[dict[str, Any], int, int]:
        row: dict[str, Any] = {}
        lengths = {}
        for step in self.steps:
            if isinstance(step, str):
                pos, lengths[step] = _scan_array(blob, ends, pos, stop, first_varint, counts)
            else:
                stream.seek(pos)
                row.update(cast("dict[str, Any]", fastavro.schemaless_reader(stream, step, None)))
                pos = stream.tell()
            if pos > stop:
                raise CorruptRecordError("GenerationRecord: body is truncated")
        if pos != stop:
            raise CorruptRecordError("GenerationRecord: trailing bytes after the record body")
        row.update(self.defaults)
        for name in self.dropped:
            del row[name]
        return row, lengths["prompt_ids"], lengths["output_ids"]


def _scan_array(blob: bytes, ends: np.ndarray, pos: int, stop: int, first_varint: list[int],
                counts: list[int]) -> tuple[int, int]:
    """Find the blocks of an Avro int array at ``pos``; return the position after it and its length."""
    total = 0
    while True:
        count, pos = _read_long(blob, pos, stop)
        if count == 0:
            return pos, total
        if count < 0:  # a block that also states its size in bytes
            count = -count
            _size, pos = _read_long(blob, pos, stop)
        k = int(ends.searchsorted(pos))  # the varint starting at pos ends at ends[k]
        last = k + count - 1
        if last >= len(ends) or ends[last] >= stop:
            raise CorruptRecordError("GenerationRecord: an id array runs past the message")
        first_varint.append(k)
        counts.append(count)
        total += count
        pos = int(ends[last]) + 1


def _read_long(blob: bytes, pos: int, stop: int) -> tuple[int, int]:
    """One zigzag varint (an Avro long) at ``pos``."""
    shift = value = 0
    while True:
        if pos >= stop or shift > 63:
            raise CorruptRecordError("GenerationRecord: bad or truncated varint")
        byte = blob[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _varints(arr: np.ndarray, ends: np.ndarray, first: np.ndarray, counts: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Decode the varints ``ends[first[b]:first[b]+counts[b]]`` of every block ``b`` as Avro ints.

    Every varint of the chunk is decoded (contiguous passes are cheaper than gathers), then the
    ones inside id arrays are picked.

    Returns:
        the int32 values, and a flag per value that is set where the varint is not a 32-bit int.
    """
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int32), np.zeros(0, bool)
    start = np.empty_like(ends)
    start[0] = 0
    start[1:] = ends[:-1] + 1
    extra = ends - start  # bytes after the first one: 0..4 for an Avro int
    low7 = np.zeros(len(arr) + 4, np.uint32)  # padded, so start + k never runs off the end
    np.bitwise_and(arr, 0x7F, out=low7[:len(arr)], casting="unsafe")
    value = low7[start]
    for k in range(1, min(int(extra.max()), 4) + 1):
        part = low7[start + k]
        part <<= np.uint32(7 * k)
        part *= extra >= k  # zero where the varint is shorter than k + 1 bytes
        value |= part
    which = np.repeat(first - _exclusive_cumsum(counts), counts) + np.arange(total)
    picked, size = value[which], extra[which]
    broken = size > 4
    five = np.flatnonzero(size == 4)
    if five.size:
        broken[five] |= arr[start[which[five]] + 4] > 0x0F  # bits above 32
    decoded = (picked >> np.uint32(1)) ^ (np.uint32(0) - (picked & np.uint32(1)))
    return decoded.view(np.int32), broken


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), np.int64)
    np.cumsum(values[:-1], out=out[1:])
    return out


class _Packed:
    """Messages of a version that packs ids as int32 bytes: fastavro per record, numpy per chunk."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = fastavro.parse_schema(schema)

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


Decoder = Any  # _Plan or _Packed: ``decode(values) -> (batch, ok, bad)``


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
                decoder: Decoder = _Packed(schema)
            else:
                decoder = _Plan(schema, versions[-1])
        except (ValueError, KeyError):
            continue
        paths[MAGIC + schema_fingerprint(schema)] = decoder
    return paths


_FAST = _fast_paths()
