"""An in-memory Kafka for unit tests of the stage loops; it satisfies ``eaglefeed.kafka.Clients``.

What it models, after kafka-python 3.0.12 against a Kafka 4 broker:

- topics of N partitions; records have topic/partition/offset/key/value; a transaction's end
  takes an offset (a control marker), as in Kafka, and consumers skip it;
- one consumer per group: it joins on its first ``poll`` and gets every partition of its
  topics. :meth:`FakeKafka.rebalance` and :meth:`FakeKafka.lose` script what a group change
  would do; they take effect on the member's next ``poll``, which calls the listener (sync
  ``ConsumerRebalanceListener``, or ``AsyncConsumerRebalanceListener`` whose coroutines run to
  completion inside ``poll``). With ``CooperativeStickyAssignor`` only the moved partitions are
  revoked (taken out of the assignment before the callback, as kafka-python does); otherwise
  the protocol is eager: everything is revoked, then the whole new assignment is assigned, and
  every position comes again from the committed offset (or a ``seek`` in the listener);
- pause/resume, seek, ``max_records``/``max_poll_records``, commit/committed with metadata;
- producers whose ``send`` futures settle at once (``acks="immediate"``) or on ``flush``
  (``acks="flush"``), with scripted failures (:meth:`FakeKafka.fail_sends`);
- transactions: records of an open transaction hold back ``read_committed`` consumers (the
  last stable offset), aborted ones are never shown to them, offsets sent to a transaction
  are committed with it, and ``init_transactions`` fences the previous producer of the id.
"""

from __future__ import annotations

import inspect
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
)
from kafka.structs import OffsetAndMetadata, TopicPartition

Partitions = Iterable["TopicPartition | tuple[str, int]"]


@dataclass(frozen=True)
class FakeRecord:
    """A record as a consumer sees it (the fields of kafka-python's ``ConsumerRecord`` the loops use)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0


@dataclass(frozen=True)
class FakeRecordMetadata:
    """What a settled ``send`` future holds."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class FakeGroupMetadata:
    """``consumer.group_metadata()``: a transaction checks the generation against the group's."""

    group_id: str
    generation_id: int
    member_id: str


@dataclass(frozen=True)
class CommitEntry:
    """One offset commit, in the order the fake saw them; ``how``: commit, commit_async, transaction."""

    group: str
    offsets: dict[TopicPartition, OffsetAndMetadata]
    how: str


class FakeFuture:
    """kafka-python's ``Future``: callbacks get ``(*args, value)``; awaiting a settled one never yields."""

    def __init__(self) -> None:
        self.is_done = False
        self.value: Any = None
        self.exception: BaseException | None = None
        self._callbacks: list[tuple[bool, Callable[[Any], Any]]] = []
        self._lock = threading.Lock()

    def success(self, value: Any) -> FakeFuture:
        """Settle with ``value`` and run the callbacks (on the calling thread)."""
        return self._settle(value, None)

    def failure(self, exc: BaseException) -> FakeFuture:
        """Settle with ``exc`` and run the errbacks (on the calling thread)."""
        return self._settle(None, exc)

    def add_callback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> FakeFuture:
        """Call ``f(*args, value, **kwargs)`` on success."""
        return self._add(True, lambda v: f(*args, v, **kwargs))

    def add_errback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> FakeFuture:
        """Call ``f(*args, exception, **kwargs)`` on failure."""
        return self._add(False, lambda e: f(*args, e, **kwargs))

    def get(self, timeout: float | None = None) -> Any:
        """The value; raises the failure, or ``KafkaTimeoutError`` while unsettled (it never waits)."""
        if not self.is_done:
            raise KafkaTimeoutError("the fake future is not settled (flush the producer first)")
        if self.exception is not None:
            raise self.exception
        return self.value

    def __await__(self) -> Any:
        if not self.is_done:
            yield self  # the fake's listener runner refuses this: nothing would ever settle it
        return self.get()

    def _settle(self, value: Any, exc: BaseException | None) -> FakeFuture:
        with self._lock:
            assert not self.is_done, "settled twice"
            self.value, self.exception, self.is_done = value, exc, True
            callbacks = list(self._callbacks)
        for ok, f in callbacks:
            if ok == (exc is None):
                f(value if ok else exc)
        return self

    def _add(self, ok: bool, f: Callable[[Any], Any]) -> FakeFuture:
        with self._lock:
            if not self.is_done:
                self._callbacks.append((ok, f))
                return self
        if ok == (self.exception is None):
            f(self.value if ok else self.exception)
        return self


class _Txn:
    def __init__(self) -> None:
        self.state = "open"  # open, committed, aborted
        self.touched: set[TopicPartition] = set()
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}


@dataclass
class _Entry:
    record: FakeRecord | None  # None: a transaction marker
    txn: _Txn | None = None


@dataclass
class _Group:
    committed: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    generation: int = 0
    member: FakeConsumer | None = None
    events: deque[_Event] = field(default_factory=deque)


@dataclass
class _Event:
    kind: str  # rebalance or lose
    first: set[TopicPartition] | None  # revoked or lost (None: everything owned)
    second: set[TopicPartition]  # assigned
    applied: threading.Event


@dataclass
class _Failure:
    error: KafkaError
    topic: str | None = None
    at_send: bool = False


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
        self.logs: dict[TopicPartition, list[_Entry]] = {}
        self.partitions: dict[str, int] = {}
        self.groups: dict[str, _Group] = {}
        self.commits: list[CommitEntry] = []
        self.consumers: list[FakeConsumer] = []
        self.producers: list[FakeProducer] = []
        self.send_failures: deque[_Failure] = deque()
        self.commit_failures: deque[KafkaError] = deque()
        self.transaction_failures: deque[KafkaError] = deque()
        self.transactional: dict[str, FakeProducer] = {}
        self._round_robin: dict[str, int] = {}

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
            return self._write(TopicPartition(topic, partition), key, value, None)

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
            return self._group(group).committed.get(TopicPartition(topic, partition))

    def set_committed(self, group: str, topic: str, partition: int, offset: int, metadata: str = "") -> None:
        """Preset a group's committed offset (what an earlier member left)."""
        with self.lock:
            self._group(group).committed[TopicPartition(topic, partition)] = OffsetAndMetadata(
                offset, metadata, -1)

    def rebalance(self, *, revoke: Partitions = (), assign: Partitions = (),
                  group: str | None = None) -> threading.Event:
        """Script a group change for the member's next poll; the event is set once it ran."""
        return self._script("rebalance", _tps(revoke), _tps(assign), group)

    def lose(self, partitions: Partitions | None = None, *, group: str | None = None) -> threading.Event:
        """Script the loss of ``partitions`` (default: all the member owns) for its next poll."""
        return self._script("lose", None if partitions is None else _tps(partitions), set(), group)

    # --- scripted failures ------------------------------------------------------------------
    def fail_sends(self, error: KafkaError, *, count: int = 1, topic: str | None = None,
                   at_send: bool = False) -> None:
        """Fail the next ``count`` sends (to ``topic``): their futures fail, or ``send`` raises."""
        with self.lock:
            self.send_failures.extend(_Failure(error, topic, at_send) for _ in range(count))

    def fail_commits(self, error: KafkaError, *, count: int = 1) -> None:
        """Fail the next ``count`` consumer commits (``commit`` raises, ``commit_async`` fails)."""
        with self.lock:
            self.commit_failures.extend([error] * count)

    def fail_transactions(self, error: KafkaError, *, count: int = 1) -> None:
        """Fail the next ``count`` ``commit_transaction`` calls (the transaction must then be aborted)."""
        with self.lock:
            self.transaction_failures.extend([error] * count)

    # --- eaglefeed.kafka.Clients ------------------------------------------------------------
    def consumer(self, group_id: str, **settings: Any) -> FakeConsumer:
        """A consumer in ``group_id`` (``max_poll_records``, ``isolation_level``, ``auto_offset_reset``
        and ``partition_assignment_strategy`` are honoured; every setting is kept in ``settings``)."""
        consumer = FakeConsumer(self, group_id, settings)
        with self.lock:
            self.consumers.append(consumer)
        return consumer

    def producer(self, **settings: Any) -> FakeProducer:
        """A producer; ``transactional_id`` makes it transactional."""
        producer = FakeProducer(self, settings)
        with self.lock:
            self.producers.append(producer)
        return producer

    def subscribe(self, consumer: Any, topics: list[str], listener: Any) -> None:
        """Subscribe ``consumer`` to ``topics`` with ``listener``."""
        consumer.subscribe(topics, listener=listener)

    def wait_for_topics(self, topics: list[str], stop: Any) -> bool:
        """True once every topic exists; False if ``stop`` is set first."""
        while stop is None or not stop.is_set():
            with self.lock:
                if all(t in self.partitions for t in topics):
                    return True
            time.sleep(0.01)
        return False

    # --- internals (called with the lock held) ----------------------------------------------
    def _group(self, group: str) -> _Group:
        return self.groups.setdefault(group, _Group())

    def _script(self, kind: str, first: set[TopicPartition] | None, second: set[TopicPartition],
                group: str | None) -> threading.Event:
        applied = threading.Event()
        with self.lock:
            if group is None:
                assert len(self.groups) == 1, "name the group: the fake knows several (or none yet)"
                group = next(iter(self.groups))
            self._group(group).events.append(_Event(kind, first, second, applied))
        return applied

    def _write(self, tp: TopicPartition, key: bytes | None, value: bytes | None, txn: _Txn | None
               ) -> FakeRecord:
        log = self.logs.get(tp)
        if log is None:
            raise KafkaTimeoutError(f"no such topic partition {tp} in the fake")
        record = FakeRecord(tp.topic, tp.partition, len(log), key, value, int(time.time() * 1000))
        log.append(_Entry(record, txn))
        if txn is not None:
            txn.touched.add(tp)
        return record

    def _partition_for(self, topic: str, key: bytes | None) -> int:
        count = self.partitions.get(topic)
        if count is None:
            raise KafkaTimeoutError(f"Failed to update metadata: no topic {topic} in the fake")
        if key is not None:
            return zlib.crc32(key) % count
        self._round_robin[topic] = self._round_robin.get(topic, -1) + 1
        return self._round_robin[topic] % count

    def _stable_end(self, tp: TopicPartition) -> int:
        log = self.logs[tp]
        return next((i for i, e in enumerate(log) if e.txn is not None and e.txn.state == "open"), len(log))

    def _end_transaction(self, txn: _Txn, state: str) -> None:
        txn.state = state
        for tp in txn.touched:
            self.logs[tp].append(_Entry(None, txn))
        if state == "committed":
            for group, offsets in txn.offsets.items():
                self._group(group).committed.update(offsets)
                self.commits.append(CommitEntry(group, dict(offsets), "transaction"))


class FakeConsumer:
    """A group member (see the module docstring); satisfies ``eaglefeed.kafka.Consumer``."""

    def __init__(self, kafka: FakeKafka, group_id: str, settings: dict[str, Any]) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.settings = settings
        self.max_poll_records = int(settings.get("max_poll_records", 500))
        self.read_committed = settings.get("isolation_level", "read_committed") == "read_committed"
        self.earliest = settings.get("auto_offset_reset", "earliest") == "earliest"
        strategy = settings.get("partition_assignment_strategy") or ()
        self.cooperative = bool(strategy) and all(
            getattr(s, "name", None) == CooperativeStickyAssignor.name for s in strategy)
        self.topics: list[str] = []
        self.listener: Any = None
        self.joined = False
        self.closed = False
        self.polls = 0
        self._positions: dict[TopicPartition, int | None] = {}  # None: from the committed offset
        self._paused: set[TopicPartition] = set()

    def subscribe(self, topics: Iterable[str] = (), pattern: Any = None, listener: Any = None) -> None:
        """Subscribe to ``topics``; the group is joined on the first poll."""
        self.topics, self.listener = list(topics), listener

    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[FakeRecord]]:
        """Join or apply scripted group changes (running the listener), then fetch."""
        self._check_open()
        failure = self._join() if not self.joined else None
        while failure is None:
            with self.kafka.lock:
                events = self.kafka._group(self.group_id).events
                event = events.popleft() if events else None
            if event is None:
                break
            failure = self._apply(event)
        if failure is not None:
            raise KafkaError("User rebalance callback throws an error") from failure
        batch = self._fetch(max_records or self.max_poll_records)
        self.polls += 1
        if not batch and timeout_ms:
            time.sleep(min(timeout_ms / 1000, self.kafka.idle_poll_seconds))
        return batch

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching ``partitions`` (which must be assigned)."""
        with self.kafka.lock:
            for tp in partitions:
                if tp not in self._positions:
                    raise KeyError(tp)
                self._paused.add(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch ``partitions`` again."""
        with self.kafka.lock:
            for tp in partitions:
                if tp not in self._positions:
                    raise KeyError(tp)
                self._paused.discard(tp)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        with self.kafka.lock:
            return set(self._paused)

    def assignment(self) -> set[TopicPartition]:
        """The assigned partitions."""
        with self.kafka.lock:
            return set(self._positions)

    def position(self, tp: TopicPartition) -> int:
        """The next offset a poll returns for ``tp``."""
        with self.kafka.lock:
            return self._position(tp)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Fetch ``partition`` from ``offset`` on."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be int >= 0")
        with self.kafka.lock:
            if partition not in self._positions:
                raise ValueError("Unassigned partition")
            self._positions[partition] = offset

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: the positions) for the group."""
        self._commit(offsets, "commit")

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
                     callback: Callable[[Any, Any], Any] | None = None) -> FakeFuture:
        """Commit at once; the returned future (already settled) holds the outcome."""
        future = FakeFuture()
        try:
            self._commit(offsets, "commit_async")
        except KafkaError as exc:
            outcome: Any = exc
            future.failure(exc)
        else:
            outcome = None
            future.success(None)
        if callback is not None:
            callback(offsets, outcome)
        return future

    def committed(self, partition: TopicPartition, metadata: bool = False,
                  timeout_ms: int | None = None) -> Any:
        """The group's committed offset (``OffsetAndMetadata`` with ``metadata=True``), or None."""
        with self.kafka.lock:
            found = self.kafka._group(self.group_id).committed.get(partition)
        return found if metadata or found is None else found.offset

    def group_metadata(self) -> FakeGroupMetadata:
        """The membership snapshot a transaction's offsets are fenced by."""
        with self.kafka.lock:
            generation = self.kafka._group(self.group_id).generation
        return FakeGroupMetadata(self.group_id, generation, f"member-{id(self)}")

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Revoke the assignment through the listener (as kafka-python does), then leave the group."""
        if self.closed:
            return
        self.closed = True
        with self.kafka.lock:
            owned = set(self._positions)
        failure = self._call("on_partitions_revoked", owned) if owned and self.listener else None
        with self.kafka.lock:
            self._positions.clear()
            self._paused.clear()
            group = self.kafka._group(self.group_id)
            if group.member is self:
                group.member = None
                group.generation += 1
        if failure is not None:
            raise KafkaError("User rebalance callback throws an error") from failure

    # --- internals ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("KafkaConsumer is closed")

    def _join(self) -> BaseException | None:
        with self.kafka.lock:
            group = self.kafka._group(self.group_id)
            assert group.member in (None, self), "the fake supports one member per group"
            group.member, group.generation = self, group.generation + 1
            parts = {TopicPartition(t, p) for t in self.topics
                     for p in range(self.kafka.partitions.get(t, 0))}
            self._positions = dict.fromkeys(parts)
            self.joined = True
        if parts or not self.cooperative:
            return self._call("on_partitions_assigned", parts)
        return None

    def _apply(self, event: _Event) -> BaseException | None:
        try:
            with self.kafka.lock:
                owned = set(self._positions)
                self.kafka._group(self.group_id).generation += 1
            if event.kind == "lose":
                lost = owned if event.first is None else event.first & owned
                self._drop(lost)
                return self._call("on_partitions_lost", lost) if lost else None
            revoked, added = (event.first or set()) & owned, event.second - owned
            if self.cooperative:
                self._drop(revoked)
                failure = self._call("on_partitions_revoked", revoked) if revoked else None
                self._add(added)
                return (self._call("on_partitions_assigned", added) if added else None) or failure
            failure = self._call("on_partitions_revoked", owned)
            self._drop(owned)
            self._add((owned - revoked) | added)
            return self._call("on_partitions_assigned", (owned - revoked) | added) or failure
        finally:
            event.applied.set()

    def _drop(self, partitions: Collection[TopicPartition]) -> None:
        with self.kafka.lock:
            for tp in partitions:
                self._positions.pop(tp, None)
                self._paused.discard(tp)

    def _add(self, partitions: Collection[TopicPartition]) -> None:
        with self.kafka.lock:
            for tp in partitions:
                self._positions[tp] = None

    def _call(self, method: str, partitions: set[TopicPartition]) -> BaseException | None:
        """Run a listener callback outside the lock; async ones run to completion here."""
        if self.listener is None:
            return None
        callback = getattr(self.listener, method)
        try:
            if inspect.iscoroutinefunction(callback):
                _run_to_completion(callback(set(partitions)))
            else:
                callback(set(partitions))
        except Exception as exc:  # noqa: BLE001 - kafka-python re-raises it from poll() as a KafkaError
            return exc
        return None

    def _position(self, tp: TopicPartition) -> int:
        position = self._positions[tp]
        if position is None:
            committed = self.kafka._group(self.group_id).committed.get(tp)
            log = self.kafka.logs[tp]
            position = committed.offset if committed is not None else 0 if self.earliest else len(log)
            self._positions[tp] = position
        return position

    def _fetch(self, limit: int) -> dict[TopicPartition, list[FakeRecord]]:
        out: dict[TopicPartition, list[FakeRecord]] = {}
        with self.kafka.lock:
            order = sorted(tp for tp in self._positions if tp not in self._paused)
            if order:  # start at another partition each poll, so none starves
                shift = self.polls % len(order)
                order = order[shift:] + order[:shift]
            for tp in order:
                position = self._position(tp)
                log = self.kafka.logs[tp]
                end = self.kafka._stable_end(tp) if self.read_committed else len(log)
                while position < end and limit > 0:
                    entry = log[position]
                    position += 1
                    hidden = entry.txn is not None and entry.txn.state == "aborted" and self.read_committed
                    if entry.record is not None and not hidden:
                        out.setdefault(tp, []).append(entry.record)
                        limit -= 1
                self._positions[tp] = position
        return out

    def _commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, how: str) -> None:
        self._check_open()
        with self.kafka.lock:
            if self.kafka.commit_failures:
                raise self.kafka.commit_failures.popleft()
            if offsets is None:
                offsets = {tp: OffsetAndMetadata(self._position(tp), "", -1) for tp in self._positions}
            self.kafka._group(self.group_id).committed.update(offsets)
            self.kafka.commits.append(CommitEntry(self.group_id, dict(offsets), how))


class FakeProducer:
    """A producer (see the module docstring); satisfies ``eaglefeed.kafka.Producer``."""

    def __init__(self, kafka: FakeKafka, settings: dict[str, Any]) -> None:
        self.kafka = kafka
        self.settings = settings
        self.transactional_id: str | None = settings.get("transactional_id")
        self.state = "ready" if self.transactional_id is None else "uninitialized"
        self.txn: _Txn | None = None
        self.closed = False
        self._unsettled: list[tuple[FakeFuture, TopicPartition, bytes | None, bytes | None,
                                    _Txn | None, KafkaError | None]] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Any = None, partition: int | None = None, timestamp_ms: int | None = None
             ) -> FakeFuture:
        """Send one record; the future settles at once or on flush (see ``FakeKafka``)."""
        with self.kafka.lock:
            self._check("send")
            if self.transactional_id is not None and self.state != "in_transaction":
                raise IllegalStateError("send outside a transaction")
            failure = next((f for f in self.kafka.send_failures if f.topic in (None, topic)), None)
            if failure is not None:
                self.kafka.send_failures.remove(failure)
                if failure.at_send:
                    raise failure.error
            if partition is None:
                partition = self.kafka._partition_for(topic, key)
            tp = TopicPartition(topic, partition)
            if tp not in self.kafka.logs:
                raise KafkaTimeoutError(f"Failed to update metadata: no partition {tp} in the fake")
            future = FakeFuture()
            self._unsettled.append((future, tp, key, value, self.txn, failure and failure.error))
            if failure is not None and self.txn is not None:
                self.state = "abortable"
        if self.kafka.acks == "immediate":
            self.flush()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Write every unsettled record and settle its future (callbacks run on this thread)."""
        with self.kafka.lock:
            settled: list[tuple[FakeFuture, FakeRecordMetadata | None, KafkaError | None]] = []
            for future, tp, key, value, txn, error in self._unsettled:
                if error is not None:
                    settled.append((future, None, error))
                else:
                    rec = self.kafka._write(tp, key, value, txn)
                    settled.append((future, FakeRecordMetadata(rec.topic, rec.partition, rec.offset), None))
            self._unsettled = []
        for future, metadata, error in settled:
            if error is not None:
                future.failure(error)
            else:
                future.success(metadata)

    def close(self, timeout: float | None = None) -> None:
        """Flush and close; an open transaction is aborted (the broker would time it out)."""
        if self.closed:
            return
        if self.state in ("in_transaction", "abortable"):
            self.abort_transaction()
        self.flush()
        self.closed = True

    def init_transactions(self) -> None:
        """Register the transactional id, fencing (and aborting) its previous producer."""
        with self.kafka.lock:
            if self.transactional_id is None:
                raise IllegalStateError("no transactional_id")
            self._check("init_transactions")
            previous = self.kafka.transactional.get(self.transactional_id)
            if previous is not None and previous is not self:
                if previous.txn is not None:
                    self.kafka._end_transaction(previous.txn, "aborted")
                previous.txn, previous._unsettled, previous.state = None, [], "fenced"
            self.kafka.transactional[self.transactional_id] = self
            self.state = "ready"

    def begin_transaction(self) -> None:
        """Start a transaction."""
        with self.kafka.lock:
            self._check("begin_transaction", "ready")
            self.txn, self.state = _Txn(), "in_transaction"

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                    consumer_group_metadata: FakeGroupMetadata) -> None:
        """Commit ``offsets`` with the transaction, unless the member's generation is stale."""
        with self.kafka.lock:
            self._check("send_offsets_to_transaction", "in_transaction")
            assert self.txn is not None
            group = self.kafka._group(consumer_group_metadata.group_id)
            if consumer_group_metadata.generation_id != group.generation:
                self.state = "abortable"
                raise CommitFailedError("the group rebalanced: this member's generation is stale")
            self.txn.offsets.setdefault(consumer_group_metadata.group_id, {}).update(offsets)

    def commit_transaction(self) -> None:
        """Settle the sends, then make the records visible and the offsets committed."""
        self.flush()
        with self.kafka.lock:
            self._check("commit_transaction", "in_transaction")
            if self.kafka.transaction_failures:
                self.state = "abortable"
                raise self.kafka.transaction_failures.popleft()
            assert self.txn is not None
            self.kafka._end_transaction(self.txn, "committed")
            self.txn, self.state = None, "ready"

    def abort_transaction(self) -> None:
        """Abort: its records are never shown to ``read_committed`` consumers, its offsets dropped."""
        with self.kafka.lock:
            self._check("abort_transaction", "in_transaction", "abortable")
            unsettled, self._unsettled = self._unsettled, []
            if self.txn is not None:
                self.kafka._end_transaction(self.txn, "aborted")
            self.txn, self.state = None, "ready"
        for future, *_rest in unsettled:
            future.failure(TransactionAbortedError("transaction aborted"))

    def _check(self, call: str, *states: str) -> None:
        if self.closed:
            raise IllegalStateError(f"{call}: the producer is closed")
        if self.state == "fenced":
            raise ProducerFencedError(f"{call}: fenced by a newer producer of {self.transactional_id}")
        if self.state == "abortable" and call == "commit_transaction":
            raise KafkaError("the transaction must be aborted")
        if states and self.state not in states:
            raise IllegalStateError(f"{call} in state {self.state}")


def _tps(partitions: Partitions) -> set[TopicPartition]:
    return {TopicPartition(*tp) for tp in partitions}


def _run_to_completion(coro: Any) -> Any:
    """Run a listener coroutine that awaits only settled futures (as the fake's always are)."""
    try:
        while True:
            step = coro.send(None)
            if isinstance(step, FakeFuture):
                coro.close()
                raise RuntimeError("a listener awaited a future the fake never settles")
    except StopIteration as stop:
        return stop.value
