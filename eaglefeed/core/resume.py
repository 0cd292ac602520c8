"""Resume paused partitions so that kafka-python 3.0.12 fetches them again (the stuck partition of issue 26).

kafka-python 3.0.12 keeps the records it had fetched for a partition that is paused (KAFKA-7548,
dpkp/kafka-python#2981): the half-read batch in line is parked in
``Fetcher._paused_partition_records``, and while a partition is parked there no new fetch is sent
for it (``Fetcher._fetchable_partitions``). The batch goes back in line on resume only if
``Fetcher._next_partition_records is None``, but a batch that was read to its end stays in that
slot (falsy, not None) until another partition is paused mid-batch. So a partition paused in the
middle of a batch while other partitions kept being read is, after ``resume()``, never fetched
again: no record, no error, the position unchanged, the log silent. Only closing the consumer
(stopping the worker) clears it; neither a seek nor a re-join does, as the parked batch is keyed
by the partition and outlives its assignment.

The generate worker pauses some partitions and not others (new ones held until the group settled,
``eaglefeed.consumers.generate.rebalance``, all of them when its window is full), so it can meet this;
it matches issue 26, where ``prompts-2`` sat at offset 52 of 3,314 until the worker was stopped.
:func:`resume` resumes the partitions and drops such a parked batch (:func:`release_parked`): the
position was never moved past its unread records, so the next fetch reads them again from the
position (nothing lost, nothing read twice). A consumer without these internals (a fake, another
kafka-python) is only resumed. Upstream: the unpark in ``Fetcher.fetched_records`` (3.0.12).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from kafka.structs import TopicPartition

log = logging.getLogger(__name__)


def resume(consumer: Any, partitions: Collection[TopicPartition]) -> None:
    """``consumer.resume(*partitions)``, then :func:`release_parked` (see the module)."""
    still = set(partitions) & consumer.assignment()  # (kafka-python raises for one revoked meanwhile)
    if still:
        consumer.resume(*still)
    release_parked(consumer)


def release_parked(consumer: Any) -> None:
    """Drop kafka-python's parked batch of every partition not paused now, so it is fetched again.

    Not only resumed ones: a partition revoked while parked and assigned again later is not paused
    either, and its old batch (keyed by the partition) would keep it from being fetched just the same.
    On the consumer's thread (the fetcher is not thread-safe).
    """
    parked = getattr(getattr(consumer, "_fetcher", None), "_paused_partition_records", None)
    if not isinstance(parked, dict) or not parked:
        return
    paused = consumer.paused()
    for tp in [tp for tp in parked if tp not in paused]:
        batch = parked.pop(tp)
        batch.drain()  # (the position stays where the last returned record left it)
        log.debug("dropped the parked batch of %s-%d: it is fetched again from its position",
                  tp.topic, tp.partition)
