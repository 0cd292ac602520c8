"""The fake Kafka's producer, transactions included (see ``tests.fakes.kafka``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
)
from kafka.structs import OffsetAndMetadata, TopicPartition

from tests.fakes.kafka_state import FakeFuture, FakeGroupMetadata, FakeRecordMetadata, Txn

if TYPE_CHECKING:
    from tests.fakes.kafka import FakeKafka


class FakeProducer:
    """A producer (see the module docstring); satisfies ``eaglefeed.core.clients.Producer``."""

    def __init__(self, kafka: FakeKafka, settings: dict[str, Any]) -> None:
        self.kafka = kafka
        self.settings = settings
        self.transactional_id: str | None = settings.get("transactional_id")
        self.state = "ready" if self.transactional_id is None else "uninitialized"
        self.txn: Txn | None = None
        self.closed = False
        self._unsettled: list[tuple[FakeFuture, TopicPartition, bytes | None, bytes | None,
                                    Txn | None, KafkaError | None]] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Any = None, partition: int | None = None, timestamp_ms: int | None = None
             ) -> FakeFuture:
        """Send one record; the future settles at once or on flush (see ``FakeKafka``).

        While sends are held (:meth:`FakeKafka.block_sends`) it blocks, as kafka-python's does
        while metadata is missing or its buffer is full.
        """
        gate = self.kafka.send_gate
        if gate is not None:
            gate.wait()
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
                partition = self.kafka.partition_for(topic, key)
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
                    rec = self.kafka.write(tp, key, value, txn)
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
                    self.kafka.end_transaction(previous.txn, "aborted")
                previous.txn, previous._unsettled, previous.state = None, [], "fenced"
            self.kafka.transactional[self.transactional_id] = self
            self.state = "ready"

    def begin_transaction(self) -> None:
        """Start a transaction."""
        with self.kafka.lock:
            self._check("begin_transaction", "ready")
            self.txn, self.state = Txn(), "in_transaction"

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                    consumer_group_metadata: FakeGroupMetadata) -> None:
        """Commit ``offsets`` with the transaction, unless the member's generation is stale."""
        with self.kafka.lock:
            self._check("send_offsets_to_transaction", "in_transaction")
            assert self.txn is not None
            group = self.kafka.group(consumer_group_metadata.group_id)
            if consumer_group_metadata.generation_id != group.generation:
                self.state = "abortable"
                raise CommitFailedError("the group rebalanced: this member's generation is stale")
            self.txn.offsets.setdefault(consumer_group_metadata.group_id, {}).update(offsets)

    def commit_transaction(self) -> None:
        """Settle the sends, then make the records visible and the offsets committed.

        A scripted hang (:meth:`FakeKafka.hang_transactions`) waits here, the lock released.
        """
        self.flush()
        with self.kafka.lock:
            self._check("commit_transaction", "in_transaction")
            if self.kafka.transaction_failures:
                self.state = "abortable"
                raise self.kafka.transaction_failures.popleft()
            assert self.txn is not None
            hang = self.kafka.transaction_hangs.popleft() if self.kafka.transaction_hangs else None
            if hang is None or hang.prepared:
                self.kafka.end_transaction(self.txn, "committed")
                self.txn = None
            self.state = "committing"
        if hang is not None:
            hang.gate.wait()
        with self.kafka.lock:
            self._check("commit_transaction")
            if self.txn is not None:
                self.kafka.end_transaction(self.txn, "committed")
            self.txn, self.state = None, "ready"

    def abort_transaction(self) -> None:
        """Abort: its records are never shown to ``read_committed`` consumers, its offsets dropped."""
        with self.kafka.lock:
            self._check("abort_transaction", "in_transaction", "abortable")
            unsettled, self._unsettled = self._unsettled, []
            if self.txn is not None:
                self.kafka.end_transaction(self.txn, "aborted")
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
