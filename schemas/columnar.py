"""Decode GenerationRecords straight into token columns, without a Python int per token.

``schemas.GENERATION.decode`` turns every token id into a Python int, which costs more than
writing the row to Parquet. For messages written with this process's own schema the sink
decodes the scalar fields with fastavro (field runs before, between and after the two id
arrays) and the id arrays with numpy: a chunk of messages is scanned once for varint ends,
and only the varints inside the arrays are turned into int32 values. Messages written with
another (older) schema go through the codec, which resolves them into the current one.
The result is exactly what the codec returns (a property test checks it), except that an id
whose varint is longer than a 32-bit int needs is rejected where fastavro would accept it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import fastavro
import numpy as np

from eaglefeed.errors import CorruptRecordError, SchemaError
from schemas import GENERATION, load_schema
from schemas.codec import HEADER_LEN, MAGIC

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


def decode_generations(values: Sequence[bytes]) -> Decoded:
    """Decode GenerationRecord messages into a columnar batch; bad messages are reported, not raised."""
    parts: list[GenerationBatch] = []
    index: list[int] = []
    errors: list[tuple[int, SchemaError]] = []
    pending: list[int] = []

    def drain() -> None:
        if pending:
            batch, ok, bad = _PLAN.decode_chunk([values[i] for i in pending]) if _PLAN else _slow(
                [values[i] for i in pending])
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

    def __init__(self, schema: dict[str, Any]) -> None:
        fields = schema["fields"]
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

    def decode_chunk(self, values: Sequence[bytes]
                     ) -> tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]:
        """Decode ``values``; messages of another writer schema go through the codec."""
        fast = [j for j, v in enumerate(values) if isinstance(v, bytes) and v[:HEADER_LEN] == _HEADER]
        if len(fast) < len(values):  # rare: an older schema version or garbage
            rest = sorted(set(range(len(values))) - set(fast))
            return _merge(values, fast, rest, self)
        return self._decode_fast(values)

    def _decode_fast(self, values: Sequence[bytes]
                     ) -> tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]:
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


def _merge(values: Sequence[bytes], fast: list[int], rest: list[int], plan: _Plan
           ) -> tuple[GenerationBatch, list[int], list[tuple[int, SchemaError]]]:
    """Decode the fast and the codec messages of a chunk apart, then restore message order."""
    batches, sources, bad = [], [], []
    for idx, decode in ((fast, plan._decode_fast), (rest, _slow)):
        if idx:
            batch, good, errs = decode([values[j] for j in idx])
            batches.append(batch)
            sources += [idx[g] for g in good]
            bad += [(idx[j], exc) for j, exc in errs]
    order = np.argsort(np.asarray(sources, np.int64), kind="stable")
    return (GenerationBatch.concat(batches).select(order), sorted(sources),
            sorted(bad, key=lambda item: item[0]))


_HEADER = MAGIC + GENERATION.fingerprint
try:
    _PLAN: _Plan | None = _Plan(load_schema("generation.avsc"))
except (ValueError, KeyError) as _exc:  # a schema this module cannot walk: everything goes through the codec
    _PLAN = None
