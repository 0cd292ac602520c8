"""GenerationRecord v1's id arrays (Avro varints) decoded with numpy, not a Python int per id.

The scalar fields are decoded with fastavro in runs (before, between and after the two id
arrays); a chunk of messages is scanned once for varint ends, and only the varints inside the
arrays become int32 values. Fields added to the schema since v1 get their defaults, as Avro
resolution into the current schema would give them.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, cast

import fastavro
import numpy as np

from eaglefeed.core.errors import CorruptRecordError, SchemaError
from eaglefeed.schemas.batch import TOKEN_FIELDS, Chunk, GenerationBatch, exclusive_cumsum
from eaglefeed.schemas.codec import HEADER_LEN


class VarintPlan:
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
    which = np.repeat(first - exclusive_cumsum(counts), counts) + np.arange(total)
    picked, size = value[which], extra[which]
    broken = size > 4
    five = np.flatnonzero(size == 4)
    if five.size:
        broken[five] |= arr[start[which[five]] + 4] > 0x0F  # bits above 32
    decoded = (picked >> np.uint32(1)) ^ (np.uint32(0) - (picked & np.uint32(1)))
    return decoded.view(np.int32), broken
