"""Build DeadLetterRecords: what failed, where, why, with the original bytes."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from eaglefeed.core.errors import SchemaError
from eaglefeed.schemas import DEAD_LETTER
from eaglefeed.schemas.codec import AvroCodec


def dead_letter(*, stage: str, kind: str, message: str, source: str | None = None,
                line: int | None = None, topic: str | None = None, partition: int | None = None,
                offset: int | None = None, key: bytes | None = None, value: bytes | None = None,
                record_id: str | None = None, attempts: int = 0) -> bytes:
    """Return an encoded DeadLetterRecord (messages are capped at 4000 characters)."""
    # Messages quote servers and inputs: lone surrogates and the like must not break the encode.
    message = message[:4000].encode("utf-8", "backslashreplace").decode("utf-8")
    return DEAD_LETTER.encode({
        "stage": stage, "error_kind": kind, "message": message, "source": source,
        "line": line, "topic": topic, "partition": partition, "offset": offset, "key": key,
        "value": value, "record_id": record_id, "attempts": attempts,
        "created_at": int(time.time() * 1000),
    })


def dead_letter_for(record: Any, *, stage: str, kind: str, message: str, record_id: str | None = None,
                    attempts: int = 0, codec: AvroCodec | None = None) -> bytes:
    """Return an encoded DeadLetterRecord for a Kafka ``record`` a consuming stage could not process.

    Args:
        record: the consumed record (``topic``, ``partition``, ``offset``, ``key``, ``value``).
        stage: ``generate``, ``converse`` or ``sink``.
        kind: a short stable reason code.
        message: what went wrong.
        record_id: the id of the output that failed, when one is known.
        attempts: how many times it was tried.
        codec: the codec of ``record.value`` (a PromptRecord's or GenerationRecord's): the letter
            then names the input file and line the record came from (:func:`origin`), when it decodes.
    """
    source, line = origin(record.value, codec) if codec is not None else (None, None)
    return dead_letter(stage=stage, kind=kind, message=message, source=source, line=line,
                       topic=record.topic, partition=record.partition, offset=record.offset,
                       key=record.key, value=record.value, record_id=record_id, attempts=attempts)


def origin(value: bytes | None, codec: AvroCodec) -> tuple[str | None, int | None]:
    """The input file and line a PromptRecord or GenerationRecord came from: ``(source, line)``.

    Both carry ``source`` and ``source_row``: the row's own ``id``, or its line number when the row
    has none. The line is known only in that case (a digit-only ``id`` reads as a line number);
    ``(None, None)`` when ``value`` does not decode.
    """
    try:
        decoded = codec.decode(value or b"")
    except SchemaError:
        return None, None
    return source_line(decoded)


def source_line(record: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """``(source, line)`` of a decoded PromptRecord or GenerationRecord (see :func:`origin`)."""
    source, row = record.get("source"), record.get("source_row")
    line = int(row) if isinstance(row, str) and row.isascii() and row.isdigit() and int(row) > 0 else None
    return (str(source) if source else None), line
