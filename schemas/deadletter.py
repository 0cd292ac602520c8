"""Build DeadLetterRecords: what failed, where, why, with the original bytes."""

from __future__ import annotations

import time
from typing import Any

from eaglefeed.schemas import DEAD_LETTER


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
                    attempts: int = 0) -> bytes:
    """Return an encoded DeadLetterRecord for a Kafka ``record`` a consuming stage could not process.

    Args:
        record: the consumed record (``topic``, ``partition``, ``offset``, ``key``, ``value``).
        stage: ``generate`` or ``sink``.
        kind: a short stable reason code.
        message: what went wrong.
        record_id: the id of the output that failed, when one is known.
        attempts: how many times it was tried.
    """
    return dead_letter(stage=stage, kind=kind, message=message, topic=record.topic,
                       partition=record.partition, offset=record.offset, key=record.key,
                       value=record.value, record_id=record_id, attempts=attempts)
