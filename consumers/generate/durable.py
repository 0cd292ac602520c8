"""Which prompts' generations are already durable, so that a prompt published again costs no GPU time.

A prompt can reach the prompts topic twice: a producer killed before it saved its progress
publishes the rows since its last checkpoint again, and a dead letter may be re-driven. Its
``prompt_id`` (the key) sends both copies to the same partition, so the member that generated
the first copy usually sees the second. :class:`DurableIds` remembers the record ids this worker
published and acknowledged, plus the newest ids of the generations topic read at start-up; the
loop finishes a prompt whose every sample id is in it without a request. The index is kept per
sample: a prompt published again with more samples (``produce --samples 2`` after ``--samples 1``:
the same prompt id) asks the servers only for the samples not durable yet.

Skipping is safe: an id enters the index only once Kafka acknowledged its record, with
``--exactly-once`` only once its transaction committed (at start-up: read_committed), and the
sink keeps every record it finds there. Memory is bounded: the oldest
prompts are forgotten past ``limit``, and then a duplicate costs a generation again (the sink
still drops the duplicate row). A copy that arrives while the first is in flight on this member
waits for it and is skipped once the first is durable (``eaglefeed.consumers.generate.loop``).
Not covered: a copy that a rebalance hands to a member which started before the first was published.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.clients import Clients, Reader

log = logging.getLogger(__name__)
LOAD_SECONDS = 60.0


class DurableIds:
    """A bounded index: prompt id → the sample indexes whose GenerationRecords are durable.

    Args:
        limit: prompts kept (the oldest are forgotten first); 0 keeps none, so nothing is skipped.
    """

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self._samples: OrderedDict[int | str, int] = OrderedDict()  # prompt id → bit mask of samples

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, record_id: bytes | str) -> None:
        """Note a durable GenerationRecord by its id ``<prompt_id>:<sample index>`` (others are ignored)."""
        if not self.limit:
            return
        text = record_id.decode("ascii", "replace") if isinstance(record_id, bytes) else record_id
        pid, _, index = text.rpartition(":")
        try:
            bit = 1 << int(index)
        except ValueError:
            return
        key = _key(pid)
        self._samples[key] = self._samples.get(key, 0) | bit
        self._samples.move_to_end(key)
        while len(self._samples) > self.limit:
            self._samples.popitem(last=False)

    def add_all(self, record_ids: Iterable[bytes | str]) -> None:
        """Note several durable record ids."""
        for record_id in record_ids:
            self.add(record_id)

    def covers(self, prompt: Mapping[str, Any]) -> bool:
        """Whether every sample of ``prompt`` (a decoded PromptRecord) is durable already."""
        mask = self._samples.get(_key(prompt["prompt_id"]), 0)
        wanted: int = (1 << int(prompt["num_samples"])) - 1
        return wanted > 0 and mask & wanted == wanted

    def missing(self, prompt: Mapping[str, Any]) -> list[int]:
        """The sample indexes of ``prompt`` (a decoded PromptRecord) not durable yet, ascending."""
        mask = self._samples.get(_key(prompt["prompt_id"]), 0)
        return [i for i in range(int(prompt["num_samples"])) if not mask >> i & 1]


def generation_ids(messages: Iterable[tuple[str, bytes | None, bytes]], topic: str) -> list[bytes]:
    """The record ids (keys) of the GenerationRecords among ``messages`` (topic, key, value) for ``topic``."""
    return [key for msg_topic, key, _value in messages if msg_topic == topic and key]


def _key(prompt_id: str) -> int | str:
    """A hex prompt id as an integer (about half the memory of the text); any other id as is."""
    try:
        return int(prompt_id, 16)
    except ValueError:
        return prompt_id


def load_durable_ids(*, clients: Clients, topic: str, limit: int,
                     timeout: float = LOAD_SECONDS) -> DurableIds:
    """The index, filled with the keys of the newest ``limit`` records of the generations topic.

    A broker problem or a slow read only leaves the index emptier (a duplicate then costs a
    generation again), so it is logged and never stops the worker.

    Args:
        clients: where the reader (``read_committed``, in no group) comes from.
        topic: the generations topic.
        limit: prompts kept in the index (0: none, and nothing is read).
        timeout: seconds the read may take; past them the index keeps what was read.
    """
    ids = DurableIds(limit=limit)
    if not limit:
        return ids
    started = time.monotonic()
    try:
        consumer = clients.reader(enable_auto_commit=False, isolation_level="read_committed")
    except KafkaError as exc:
        log.warning("cannot read %s to skip prompts already generated (%r)", topic, exc)
        return ids
    try:
        _read_keys(consumer, topic, ids, limit=limit, deadline=started + timeout)
    except KafkaError as exc:
        log.warning("stopped reading %s early (%r): fewer republished prompts are skipped", topic, exc)
    finally:
        consumer.close()
    if len(ids):
        log.info("%d prompts of %s are durable already and will not be generated again (read in %.1fs)",
                 len(ids), topic, time.monotonic() - started)
    return ids


def _read_keys(consumer: Reader, topic: str, ids: DurableIds, *, limit: int, deadline: float) -> None:
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not parts:
        return
    consumer.assign(parts)
    ends = consumer.end_offsets(parts)
    starts = consumer.beginning_offsets(parts)
    newest = max(limit // len(parts), 1)  # per partition: the newest ids are the likeliest duplicates
    for tp in parts:
        consumer.seek(tp, max(starts[tp], ends[tp] - newest))
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        if time.monotonic() > deadline:
            log.warning("reading %s took too long: fewer republished prompts are skipped", topic)
            return
        for records in consumer.poll(timeout_ms=200).values():
            ids.add_all(r.key for r in records if r.key is not None)
