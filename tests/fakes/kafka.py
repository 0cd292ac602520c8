"""An in-memory Kafka for unit tests of the stage loops; it satisfies ``eaglefeed.core.clients.Clients``.

What it models, after kafka-python 3.0.12 against a Kafka 4 broker:

- topics of N partitions (:meth:`FakeKafka.ensure_topics` creates them as a producer does);
  records have topic/partition/offset/key/value; a transaction's end takes an offset (a control
  marker), as in Kafka, and consumers skip it;
- one consumer per group: it joins on its first ``poll`` and gets every partition of its
  topics. :meth:`FakeKafka.rebalance` and :meth:`FakeKafka.lose` script what a group change
  would do; they take effect on the member's next ``poll``, which calls the listener (sync
  ``ConsumerRebalanceListener``, or ``AsyncConsumerRebalanceListener`` whose coroutines run to
  completion inside ``poll``). With ``CooperativeStickyAssignor`` only the moved partitions are
  revoked (taken out of the assignment before the callback, as kafka-python does); otherwise
  the protocol is eager: everything is revoked, then the whole new assignment is assigned, and
  every position comes again from the committed offset (or a ``seek`` in the listener);
  :meth:`FakeKafka.expire_membership` gives the member a new member id (a session that expired);
- pause/resume, seek, ``max_records``/``max_poll_records``, commit/committed with metadata,
  ``position`` and ``end_offsets``; a join held back (:meth:`FakeKafka.delay_join`) and fetches
  that return nothing (:meth:`FakeKafka.stall_fetches`);
- readers in no group (:meth:`FakeKafka.reader`): they assign themselves partitions, seek, and
  read ``read_committed`` as consumers do, and never touch a group;
- producers whose ``send`` futures settle at once (``acks="immediate"``) or on ``flush``
  (``acks="flush"``), with scripted failures (:meth:`FakeKafka.fail_sends`);
- transactions: records of an open transaction hold back ``read_committed`` consumers (the
  last stable offset), aborted ones are never shown to them, offsets sent to a transaction
  are committed with it, and ``init_transactions`` fences the previous producer of the id;
  a ``commit_transaction`` that never returns (:meth:`FakeKafka.hang_transactions`), before
  or after the broker committed it.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.core.errors import MissingTopicError
from eaglefeed.core.kafka import topic_prefixes
from tests.fakes.kafka_consumer import FakeConsumer
from tests.fakes.kafka_producer import FakeProducer
from tests.fakes.kafka_reader import FakeReader
from tests.fakes.kafka_state import (
    CommitEntry,
    Entry,
    Event,
    Failure,
    FakeFuture,
    FakeGroupMetadata,
    FakeRecord,
    FakeRecordMetadata,
    Group,
    Hang,
    Txn,
)

__all__ = ["CommitEntry", "FakeBacklog", "FakeConsumer", "FakeFuture", "FakeGroupMetadata", "FakeKafka",
           "FakeProducer", "FakeReader", "FakeRecord", "FakeRecordMetadata"]

Partitions = Iterable["TopicPartition | tuple[str, int]"]


class FakeKafka:
    """The broker, its topics and groups; also the ``Clients`` the stages take.

    Args:
        acks: ``immediate`` settles each send at once; ``flush`` settles sends on ``flush``,
            ``close`` or ``commit_transaction`` (records are written when settled).
        idle_poll_seconds: how long a ``poll`` that returns nothing sleeps (at most its timeout),
            so an idle loop does not spin.
    """

    def __init__(self, *, acks: str = "immediate", idle_poll_seconds: float = 0.005) -> None:
        assert acks in ("immediate", "flush")
        self.acks = acks
        self.idle_poll_seconds = idle_poll_seconds
        self.lock = threading.RLock()
        self.logs: dict[TopicPartition, list[Entry]] = {}
        self.partitions: dict[str, int] = {}
        self.groups: dict[str, Group] = {}
        self.commits: list[CommitEntry] = []
        self.consumers: list[FakeConsumer] = []
        self.readers: list[FakeReader] = []
        self.producers: list[FakeProducer] = []
        self.send_failures: deque[Failure] = deque()
        self.commit_failures: deque[KafkaError] = deque()
        self.transaction_failures: deque[KafkaError] = deque()
        self.transaction_hangs: deque[Hang] = deque()
        self.transactional: dict[str, FakeProducer] = {}
        self._round_robin: dict[str, int] = {}
        self.send_gate: threading.Event | None = None
        self.topic_configs: dict[str, dict[str, str]] = {}

    # --- topics ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create ``name`` with ``partitions`` partitions (a no-op if it exists)."""
        with self.lock:
            if name not in self.partitions:
                self.partitions[name] = partitions
                for p in range(partitions):
                    self.logs[TopicPartition(name, p)] = []

    def append(self, topic: str, value: bytes | None, *, key: bytes | None = None,
               partition: int = 0) -> FakeRecord:
        """Write one record as it is (any bytes: poison records too); returns it."""
        with self.lock:
            return self.write(TopicPartition(topic, partition), key, value, None)

    def read(self, topic: str, *, committed_only: bool = True) -> list[FakeRecord]:
        """Every record of ``topic`` in partition then offset order (``read_committed`` by default)."""
        with self.lock:
            return [e.record for p in range(self.partitions[topic])
                    for e in self.logs[TopicPartition(topic, p)]
                    if e.record is not None and (not committed_only or e.txn is None
                                                 or e.txn.state == "committed")]

    def end_offset(self, topic: str, partition: int) -> int:
        """The next offset ``partition`` will write (markers included)."""
        with self.lock:
            return len(self.logs[TopicPartition(topic, partition)])

    # --- groups ---------------------------------------------------------------------------
    def committed(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        """The committed offset and metadata of a group's partition."""
        with self.lock:
            return self.group(group).committed.get(TopicPartition(topic, partition))

    def set_committed(self, group: str, topic: str, partition: int, offset: int, metadata: str = "") -> None:
        """Preset a group's committed offset (what an earlier member left)."""
        with self.lock:
            self.group(group).committed[TopicPartition(topic, partition)] = OffsetAndMetadata(
                offset, metadata, -1)

    def rebalance(self, *, revoke: Partitions = (), assign: Partitions = (),
                  group: str | None = None) -> threading.Event:
        """Script a group change for the member's next poll; the event is set once it ran."""
        return self._script("rebalance", _tps(revoke), _tps(assign), group)

    def lose(self, partitions: Partitions | None = None, *, group: str | None = None) -> threading.Event:
        """Script the loss of ``partitions`` (default: all the member owns) for its next poll."""
        return self._script("lose", None if partitions is None else _tps(partitions), set(), group)

    def expire_membership(self, group: str) -> None:
        """The member's session expired (a paused process) and it joined again under a new member id.

        What it owned stays assigned until a scripted :meth:`rebalance` takes it: kafka-python
        3.0.12 then reports it revoked, not lost.
        """
        with self.lock:
            member = self.group(group).member
            assert member is not None, "no member to expire"
            member.member_id = f"{member.member_id}-rejoined"

    def delay_join(self, group: str) -> threading.Event:
        """Hold the group's member out of the group (polls return nothing, no assignment) until the
        returned event is set: as a join that waits for dead members' sessions to expire."""
        gate = threading.Event()
        with self.lock:
            self.group(group).join_gate = gate
        return gate

    def stall_fetches(self, group: str) -> threading.Event:
        """Polls of the group's member return nothing (a slow fetch) until the returned event is set."""
        gate = threading.Event()
        with self.lock:
            self.group(group).fetch_gate = gate
        return gate

    def block_sends(self) -> threading.Event:
        """Every producer's ``send`` blocks until the returned event is set."""
        gate = threading.Event()
        self.send_gate = gate
        return gate

    def silence_coordinator(self, group: str) -> threading.Event:
        """``committed()`` of the group's members gets no answer until the returned event is set."""
        gate = threading.Event()
        with self.lock:
            self.group(group).coordinator_silent = gate
        return gate

    # --- scripted failures ------------------------------------------------------------------
    def fail_sends(self, error: KafkaError, *, count: int = 1, topic: str | None = None,
                   at_send: bool = False) -> None:
        """Fail the next ``count`` sends (to ``topic``): their futures fail, or ``send`` raises."""
        with self.lock:
            self.send_failures.extend(Failure(error, topic, at_send) for _ in range(count))

    def fail_commits(self, error: KafkaError, *, count: int = 1) -> None:
        """Fail the next ``count`` consumer commits (``commit`` raises, ``commit_async`` fails)."""
        with self.lock:
            self.commit_failures.extend([error] * count)

    def fail_transactions(self, error: KafkaError, *, count: int = 1) -> None:
        """Fail the next ``count`` ``commit_transaction`` calls (the transaction must then be aborted)."""
        with self.lock:
            self.transaction_failures.extend([error] * count)

    def hang_transactions(self, *, prepared: bool = False, count: int = 1) -> threading.Event:
        """The next ``count`` ``commit_transaction`` calls do not return until the event is set.

        As kafka-python 3.0.12's when its request to the transaction coordinator was lost (a
        coordinator that died under it): the call waits forever. ``prepared``: the broker had
        the commit, so the transaction commits (records visible, offsets committed) but the
        caller is never told; otherwise it stays open (holding back ``read_committed`` readers)
        until a newer producer of the id fences the caller, which aborts it. Once the event is
        set, the call returns (or raises ``ProducerFencedError`` if fenced meanwhile).
        """
        gate = threading.Event()
        with self.lock:
            self.transaction_hangs.extend(Hang(gate, prepared) for _ in range(count))
        return gate

    # --- eaglefeed.core.clients.Clients ------------------------------------------------------------
    def consumer(self, group_id: str, **settings: Any) -> FakeConsumer:
        """A consumer in ``group_id`` (``max_poll_records``, ``isolation_level``, ``auto_offset_reset``
        and ``partition_assignment_strategy`` are honoured; every setting is kept in ``settings``)."""
        consumer = FakeConsumer(self, group_id, settings)
        with self.lock:
            self.consumers.append(consumer)
        return consumer

    def reader(self, **settings: Any) -> FakeReader:
        """A consumer in no group that assigns itself partitions (``isolation_level`` is honoured)."""
        reader = FakeReader(self, settings)
        with self.lock:
            self.readers.append(reader)
        return reader

    def producer(self, **settings: Any) -> FakeProducer:
        """A producer; ``transactional_id`` makes it transactional."""
        producer = FakeProducer(self, settings)
        with self.lock:
            self.producers.append(producer)
        return producer

    def subscribe(self, consumer: Any, topics: list[str], listener: Any) -> None:
        """Subscribe ``consumer`` to ``topics`` with ``listener``."""
        consumer.subscribe(topics, listener=listener)

    def wait_for_topics(self, topics: list[str], stop: Any, timeout: float | None = None) -> bool:
        """True once every topic exists; False if ``stop`` is set first; raises after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while stop is None or not stop.is_set():
            with self.lock:
                missing = sorted(set(topics) - set(self.partitions))
                present = list(self.partitions)
            if not missing:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                raise MissingTopicError(f"no topic {', '.join(missing)} after {timeout:g} s; prefixes on the "
                                        f"broker: {', '.join(topic_prefixes(present))}")
            time.sleep(0.01)
        return False

    def backlog(self) -> FakeBacklog:
        """A group's unread records per partition (committed offset to last stable offset)."""
        return FakeBacklog(self)

    def ensure_topics(self, partitions: dict[str, int], *,
                      configs: Mapping[str, Mapping[str, str]] | None = None) -> set[str]:
        """Create the topics of ``partitions`` that do not exist yet and return their names.

        ``configs`` are kept in :attr:`topic_configs` (the fake applies none of them).
        """
        with self.lock:
            created = {name for name in partitions if name not in self.partitions}
            for name in created:
                self.create_topic(name, partitions[name])
                if configs and name in configs:
                    self.topic_configs[name] = dict(configs[name])
        return created

    # --- broker internals, for the fake clients (called with the lock held) ----------------
    def group(self, group: str) -> Group:
        return self.groups.setdefault(group, Group())

    def _script(self, kind: str, first: set[TopicPartition] | None, second: set[TopicPartition],
                group: str | None) -> threading.Event:
        applied = threading.Event()
        with self.lock:
            if group is None:
                assert len(self.groups) == 1, "name the group: the fake knows several (or none yet)"
                group = next(iter(self.groups))
            self.group(group).events.append(Event(kind, first, second, applied))
        return applied

    def write(self, tp: TopicPartition, key: bytes | None, value: bytes | None, txn: Txn | None
               ) -> FakeRecord:
        log = self.logs.get(tp)
        if log is None:
            raise KafkaTimeoutError(f"no such topic partition {tp} in the fake")
        record = FakeRecord(tp.topic, tp.partition, len(log), key, value, int(time.time() * 1000))
        log.append(Entry(record, txn))
        if txn is not None:
            txn.touched.add(tp)
        return record

    def partition_for(self, topic: str, key: bytes | None) -> int:
        count = self.partitions.get(topic)
        if count is None:
            raise KafkaTimeoutError(f"Failed to update metadata: no topic {topic} in the fake")
        if key is not None:
            return zlib.crc32(key) % count
        self._round_robin[topic] = self._round_robin.get(topic, -1) + 1
        return self._round_robin[topic] % count

    def stable_end(self, tp: TopicPartition) -> int:
        log = self.logs[tp]
        return next((i for i, e in enumerate(log) if e.txn is not None and e.txn.state == "open"), len(log))

    def end_transaction(self, txn: Txn, state: str) -> None:
        txn.state = state
        for tp in txn.touched:
            self.logs[tp].append(Entry(None, txn))
        if state == "committed":
            for group, offsets in txn.offsets.items():
                self.group(group).committed.update(offsets)
                self.commits.append(CommitEntry(group, dict(offsets), "transaction"))


def _tps(partitions: Partitions) -> set[TopicPartition]:
    return {TopicPartition(*tp) for tp in partitions}


class FakeBacklog:
    """Satisfies ``eaglefeed.core.clients.Backlog`` from the fake's logs and committed offsets.

    ``unanswered`` makes every read return None (a broker that did not answer); ``reads`` counts them.
    """

    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka
        self.unanswered = False
        self.reads = 0
        self.closed = False

    def read(self, group: str, topic: str) -> dict[int, int] | None:
        """Partition → records between ``group``'s committed offset and the last stable offset."""
        self.reads += 1
        if self.unanswered:
            return None
        with self.kafka.lock:
            unread = {}
            for p in range(self.kafka.partitions.get(topic, 0)):
                tp = TopicPartition(topic, p)
                committed = self.kafka.group(group).committed.get(tp)
                unread[p] = max(0, self.kafka.stable_end(tp) - (committed.offset if committed else 0))
            return unread

    def members(self, group: str) -> int | None:
        """How many members ``group`` has (the fake's groups hold at most one), or None when unanswered."""
        if self.unanswered:
            return None
        with self.kafka.lock:
            known = self.kafka.groups.get(group)
            return int(known is not None and known.member is not None)

    def close(self) -> None:
        """Nothing to close; noted for tests."""
        self.closed = True
