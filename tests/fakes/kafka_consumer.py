"""The fake Kafka's consumer: one group member (see ``tests.fakes.kafka``)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata, TopicPartition

from tests.fakes.kafka_state import CommitEntry, Event, FakeFuture, FakeGroupMetadata, FakeRecord

if TYPE_CHECKING:
    from tests.fakes.kafka import FakeKafka


class FakeConsumer:
    """A group member (see the module docstring); satisfies ``eaglefeed.core.clients.Consumer``."""

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
        self.end_offset_calls = 0
        self.member_id = f"member-{id(self)}"  # a new one after FakeKafka.expire_membership
        self._positions: dict[TopicPartition, int | None] = {}  # None: from the committed offset
        self._paused: set[TopicPartition] = set()

    def subscribe(self, topics: Iterable[str] = (), pattern: Any = None, listener: Any = None) -> None:
        """Subscribe to ``topics``; the group is joined on the first poll."""
        self.topics, self.listener = list(topics), listener

    def unsubscribe(self) -> None:
        """Leave the subscription and the assignment, calling no listener (as kafka-python 3.0.12);
        the next ``subscribe`` and poll join again."""
        with self.kafka.lock:
            self.topics = []
            self.joined = False
            self._positions = {}
            self._paused.clear()

    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[FakeRecord]]:
        """Join or apply scripted group changes (running the listener), then fetch."""
        self._check_open()
        if not self.joined and not self._gate_open("join_gate"):
            time.sleep(min(timeout_ms / 1000, self.kafka.idle_poll_seconds))
            return {}
        failure = self._join() if not self.joined else None
        while failure is None:
            with self.kafka.lock:
                events = self.kafka.group(self.group_id).events
                event = events.popleft() if events else None
            if event is None:
                break
            failure = self._apply(event)
        if failure is not None:
            raise KafkaError("User rebalance callback throws an error") from failure
        batch = self._fetch(max_records or self.max_poll_records) if self._gate_open("fetch_gate") else {}
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

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        """The next offset a poll returns for ``tp`` (``IllegalStateError`` if not assigned)."""
        with self.kafka.lock:
            if tp not in self._positions:
                raise IllegalStateError("Partition is not assigned")
            return self._position(tp)

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                    ) -> dict[TopicPartition, int]:
        """Each partition's end: the last stable offset under ``read_committed``, else the log end."""
        with self.kafka.lock:
            self.end_offset_calls += 1
            return {tp: self.kafka.stable_end(tp) if self.read_committed else len(self.kafka.logs[tp])
                    for tp in partitions}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Fetch ``partition`` from ``offset`` on."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be int >= 0")
        with self.kafka.lock:
            if partition not in self._positions:
                raise ValueError("Unassigned partition")
            self._positions[partition] = offset

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Fetch ``partitions`` (all assigned ones when none is named) from their first offset."""
        with self.kafka.lock:
            for tp in partitions or tuple(self._positions):
                if tp not in self._positions:
                    raise ValueError("Unassigned partition")
                self._positions[tp] = 0

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                          ) -> dict[TopicPartition, int]:
        """Each partition's first offset (the fake never deletes records: 0)."""
        return dict.fromkeys(partitions, 0)

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
        """The group's committed offset (``OffsetAndMetadata`` with ``metadata=True``), or None.

        While the coordinator does not answer (:meth:`FakeKafka.silence_coordinator`), it blocks:
        forever without ``timeout_ms`` (as kafka-python does), else ``KafkaTimeoutError`` after it.
        """
        with self.kafka.lock:
            silent = self.kafka.group(self.group_id).coordinator_silent
        if silent is not None and not silent.wait(None if timeout_ms is None else timeout_ms / 1000):
            raise KafkaTimeoutError(f"no committed offset within {timeout_ms} ms")
        with self.kafka.lock:
            found = self.kafka.group(self.group_id).committed.get(partition)
        return found if metadata or found is None else found.offset

    def group_metadata(self) -> FakeGroupMetadata:
        """The membership snapshot a transaction's offsets are fenced by."""
        with self.kafka.lock:
            generation = self.kafka.group(self.group_id).generation
        return FakeGroupMetadata(self.group_id, generation, self.member_id)

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
            group = self.kafka.group(self.group_id)
            if group.member is self:
                group.member = None
                group.generation += 1
        if failure is not None:
            raise KafkaError("User rebalance callback throws an error") from failure

    # --- internals ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("KafkaConsumer is closed")

    def _gate_open(self, name: str) -> bool:
        with self.kafka.lock:
            gate = getattr(self.kafka.group(self.group_id), name)
        return gate is None or gate.is_set()

    def _join(self) -> BaseException | None:
        with self.kafka.lock:
            group = self.kafka.group(self.group_id)
            assert group.member in (None, self), "the fake supports one member per group"
            group.member, group.generation = self, group.generation + 1
            parts = {TopicPartition(t, p) for t in self.topics
                     for p in range(self.kafka.partitions.get(t, 0))}
            self._positions = dict.fromkeys(parts)
            self.joined = True
        if parts or not self.cooperative:
            return self._call("on_partitions_assigned", parts)
        return None

    def _apply(self, event: Event) -> BaseException | None:
        try:
            with self.kafka.lock:
                owned = set(self._positions)
                self.kafka.group(self.group_id).generation += 1
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
            committed = self.kafka.group(self.group_id).committed.get(tp)
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
                end = self.kafka.stable_end(tp) if self.read_committed else len(log)
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
            self.kafka.group(self.group_id).committed.update(offsets)
            self.kafka.commits.append(CommitEntry(self.group_id, dict(offsets), how))


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
