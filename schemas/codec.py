"""Avro single-object encoding of our records, on fastavro.

Every message is ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of the writer schema's
parsing canonical form (little-endian) + the Avro binary body. A reader keeps the writer
schemas it knows by fingerprint and resolves each body into its own (reader) schema, so
records written by an older schema version stay readable.
"""

from __future__ import annotations

import array
import io
import json
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any, cast

import fastavro
import numpy as np
from fastavro.schema import fingerprint, to_parsing_canonical_form

from eaglefeed.core.errors import CorruptRecordError, SchemaError, UnknownSchemaError

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
PACKED_TYPE = ["bytes", {"type": "array", "items": "int"}]
INT32 = np.dtype("<i4")
_LITTLE = sys.byteorder == "little" and array.array("i").itemsize == 4


def schema_fingerprint(schema: Mapping[str, Any] | str) -> bytes:
    """Return the 8-byte CRC-64-AVRO fingerprint used in the single-object header."""
    plain = schema if isinstance(schema, str) else dict(schema)
    canonical = to_parsing_canonical_form(fastavro.parse_schema(plain, _write_hint=False))
    # fastavro renders the 64-bit fingerprint as hex of its little-endian bytes.
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


class AvroCodec:
    """Encode and decode one record type.

    Args:
        schema: the reader (and writer) schema of this process, as a JSON-like dict.
        older_schemas: earlier versions of the schema whose records must stay readable.
    """

    def __init__(self, schema: Mapping[str, Any], *,
                 older_schemas: tuple[Mapping[str, Any], ...] = ()) -> None:
        parsed: Any = fastavro.parse_schema(dict(schema))  # a record schema parses to a dict
        self.schema: dict[str, Any] = parsed
        self.name: str = self.schema["name"]
        self.fingerprint = schema_fingerprint(schema)
        self._header = MAGIC + self.fingerprint
        self._writers: dict[bytes, Any] = {self.fingerprint: self.schema}
        for older in older_schemas:
            self.register_writer(older)
        self.packed: tuple[str, ...] = packed_fields(schema)

    def register_writer(self, schema: Mapping[str, Any]) -> bytes:
        """Make records written with ``schema`` decodable; return its fingerprint."""
        fp = schema_fingerprint(schema)
        self._writers[fp] = fastavro.parse_schema(dict(schema))
        return fp

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Encode ``record`` as a single-object message.

        Raises:
            SchemaError: the record does not match the schema.
        """
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            if self.packed:
                record = {**record, **{name: pack_ids(record[name]) for name in self.packed}}
            fastavro.schemaless_writer(buf, self.schema, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise SchemaError(f"cannot encode {self.name}: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        """Decode a single-object message into a record of this codec's schema.

        Raises:
            CorruptRecordError: not a single-object message, or a body that does not decode.
            UnknownSchemaError: the writer fingerprint is not known to this codec.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < HEADER_LEN:
            raise CorruptRecordError(f"not a {self.name}: message shorter than the Avro header")
        if data[:2] != MAGIC:
            raise CorruptRecordError(f"not a {self.name}: missing the Avro single-object marker")
        fp = bytes(data[2:HEADER_LEN])
        writer = self._writers.get(fp)
        if writer is None:
            raise UnknownSchemaError(f"{self.name}: unknown writer schema fingerprint {fp.hex()}")
        body = io.BytesIO(data[HEADER_LEN:])
        try:  # a record schema's datum is a dict
            if writer is self.schema:
                record = cast("dict[str, Any]", fastavro.schemaless_reader(body, writer, None))
            else:
                record = cast("dict[str, Any]", fastavro.schemaless_reader(body, writer, self.schema))
        except (ValueError, TypeError, KeyError, IndexError, EOFError, UnicodeDecodeError,
                OverflowError, MemoryError, fastavro.read.SchemaResolutionError) as exc:
            raise CorruptRecordError(f"{self.name}: body does not decode: {exc}") from exc
        if body.tell() != len(data) - HEADER_LEN:
            raise CorruptRecordError(f"{self.name}: trailing bytes after the record body")
        for name in self.packed:
            value = record[name]
            if isinstance(value, bytes):
                if len(value) % 4:
                    raise CorruptRecordError(f"{self.name}: {name} is not a whole number of int32")
                record[name] = np.frombuffer(value, INT32).tolist()
        return record


def packed_fields(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the packed token-id fields of a record schema (see the module docstring)."""
    return tuple(f["name"] for f in schema["fields"] if f["type"] == PACKED_TYPE)


def pack_ids(ids: Any) -> bytes:
    """Token ids (bytes, a list or an array of ints) as little-endian int32 bytes.

    Raises:
        ValueError: an id is not an integer or does not fit in int32.
    """
    if isinstance(ids, bytes):
        return ids
    if isinstance(ids, (list, tuple)) and _LITTLE:  # the common case: array's C loop is 2x numpy's
        try:
            return array.array("i", ids).tobytes()
        except OverflowError as exc:
            raise ValueError("a token id does not fit in int32") from exc
    if isinstance(ids, (str, bytearray, memoryview)) or not hasattr(ids, "__len__"):
        raise TypeError(f"token ids must be a sequence of ints, not {type(ids).__name__}")
    arr = np.asarray(ids)
    if arr.size == 0:
        return b""
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError("token ids must be a flat sequence of ints")
    if arr.dtype != INT32:
        if arr.min() < -(2**31) or arr.max() > 2**31 - 1:
            raise ValueError("a token id does not fit in int32")
        arr = arr.astype(INT32)
    return arr.tobytes()


def load_schema(path: str) -> dict[str, Any]:
    """Load a packaged ``.avsc`` file (a path below ``schemas/``, e.g. ``history/prompt/v1.avsc``)."""
    text = resources.files("eaglefeed.schemas").joinpath(*path.split("/")).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
