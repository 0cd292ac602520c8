"""Poll a reader in no group until its partitions reach given end offsets, within a time limit.

The tools that read a topic outside any group (``status``'s workers and conversations sections,
``dead-letters``) all read "to the end offsets taken just before"; this is that loop, once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from kafka.structs import TopicPartition

from eaglefeed.core.clients import Reader, Record

POLL_MS = 200


def records_to(reader: Reader, ends: Mapping[TopicPartition, int], *,
               seconds: float) -> Iterator[tuple[TopicPartition, Record]]:
    """Every record ``reader`` returns until each partition of ``ends`` reached its end offset.

    Stops quietly after ``seconds``; :func:`reached` tells whether it got there.
    """
    deadline = time.monotonic() + seconds
    while not reached(reader, ends) and time.monotonic() < deadline:
        for tp, records in reader.poll(timeout_ms=POLL_MS).items():
            for rec in records:
                yield tp, rec


def reached(reader: Reader, ends: Mapping[TopicPartition, int]) -> bool:
    """Whether every partition of ``ends`` has its position at (or past) its end offset."""
    return all(reader.position(tp) >= end for tp, end in ends.items())
