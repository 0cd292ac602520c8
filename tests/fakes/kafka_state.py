"""The fake Kafka's records, futures and broker state (see ``tests.fakes.kafka``)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from tests.fakes.kafka_consumer import FakeConsumer


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


class Txn:
    def __init__(self) -> None:
        self.state = "open"  # open, committed, aborted
        self.touched: set[TopicPartition] = set()
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}


@dataclass
class Hang:
    gate: threading.Event  # commit_transaction returns once it is set
    prepared: bool  # the broker committed the transaction before the caller hung


@dataclass
class Entry:
    record: FakeRecord | None  # None: a transaction marker
    txn: Txn | None = None


@dataclass
class Group:
    committed: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    generation: int = 0
    member: FakeConsumer | None = None
    events: deque[Event] = field(default_factory=deque)
    join_gate: threading.Event | None = None  # the member joins only once it is set
    fetch_gate: threading.Event | None = None  # fetches return nothing until it is set
    coordinator_silent: threading.Event | None = None  # committed() gets no answer until it is set


@dataclass
class Event:
    kind: str  # rebalance or lose
    first: set[TopicPartition] | None  # revoked or lost (None: everything owned)
    second: set[TopicPartition]  # assigned
    applied: threading.Event


@dataclass
class Failure:
    error: KafkaError
    topic: str | None = None
    at_send: bool = False
