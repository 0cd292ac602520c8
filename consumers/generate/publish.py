"""How a finished prompt's records reach Kafka (when its input offset is committed is ``checkpoint``'s job).

:class:`AckedPublisher` (at least once) sends a prompt's records at once and reports the prompt
durable when the broker acknowledged all of them. :class:`TransactionalPublisher`
(``--exactly-once``) queues them for the checkpoint's next transaction, which sends them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from kafka.errors import KafkaError, ProducerFencedError
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.one_thread import OneThread
from eaglefeed.core.clients import Offsets, Producer
from eaglefeed.core.errors import FatalPublishError
from eaglefeed.core.kafka import REFUSED_FOR_GOOD

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Message = tuple[str, "bytes | None", bytes]
"""(topic, key, value)"""
RESEND_DELAY = 1.0
"""Seconds before records that failed to publish are sent again (the worker never gives up on them)."""
TRANSACTION_DEADLINE = 30.0
"""Default seconds a transaction may take (``generate --transaction-deadline``): kafka-python's
request timeout. A healthy one takes milliseconds, one through a node's failover some seconds."""
RENEW_ATTEMPTS = 5
"""New transactional producers tried in a row before the worker stops for a supervisor."""
ABANDONED_CLOSE_SECONDS = 150.0
"""How long an abandoned producer's background close waits for its records: past kafka-python's
delivery timeout (120 s), by which they have all settled."""


Reject = Callable[[Message, BaseException], "Message | None"]
"""What replaces a record the broker refused for good (its dead letter), or None to keep re-sending."""


def _final(exc: BaseException) -> bool:
    """Whether the broker refused a record for good (re-sending the same bytes cannot succeed)."""
    return isinstance(exc, REFUSED_FOR_GOOD)


@dataclass(frozen=True)
class Done:
    """A prompt's input record: partition, offset and the assignment epoch it was started under."""

    tp: TopicPartition
    offset: int
    epoch: int


@dataclass(frozen=True)
class Pending:
    """A finished prompt waiting for the next transaction: its records and its input record."""

    messages: list[Message]
    done: Done



class Publisher(Protocol):
    """What the worker loop does with a finished prompt's records."""

    async def start(self) -> None:
        """Prepare the producer."""

    async def publish(self, messages: list[Message], done: Done, reject: Reject | None = None) -> None:
        """Hand over the records of the prompt ``done`` (see each implementation for when it returns)."""

    async def close(self) -> None:
        """Flush and close the producer."""


class AckedPublisher:
    """Publish at once; report the prompt durable once the broker acknowledged every record.

    Args:
        producer: an idempotent producer.
        on_durable: called on the event loop with the prompt once all its records are acknowledged.
    """

    def __init__(self, *, producer: Producer, on_durable: Callable[[Done], None]) -> None:
        self.producer = producer
        self._on_durable = on_durable
        # send() blocks while metadata is missing or the buffer is full (up to max_block_ms):
        # never on the event loop. One thread keeps each prompt's records in order.
        self._sender = OneThread("kafka-send")

    async def start(self) -> None:
        """Nothing to prepare."""

    async def publish(self, messages: list[Message], done: Done, reject: Reject | None = None) -> None:
        """Send ``messages`` until the broker has them all (re-sending failures), then report ``done``.

        A record the broker refuses for good (a non-retriable error, e.g. larger than it accepts)
        is handed to ``reject``, and what it returns (a dead letter) is sent in its place; a
        retriable failure, or one ``reject`` returns None for, is sent again.
        """
        while messages:
            retry: list[Message] = []
            replaced: list[Message] = []
            for msg, exc in await self._send_all(messages):
                letter = reject(msg, exc) if reject is not None and _final(exc) else None
                (replaced if letter is not None else retry).append(letter if letter is not None else msg)
            if retry:
                log.warning("%d records failed to publish; re-sending", len(retry))
                await asyncio.sleep(RESEND_DELAY)
            messages = replaced + retry
        self._on_durable(done)

    async def close(self) -> None:
        """Flush and close the producer."""
        await asyncio.to_thread(self.producer.close)
        self._sender.shutdown(wait=True)

    async def _send_all(self, messages: list[Message]) -> list[tuple[Message, BaseException]]:
        """Send and wait for every acknowledgement; return the messages that failed, with their error."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        failed: list[tuple[Message, BaseException]] = []
        left = [len(messages)]

        def settle(msg: Message | None, exc: BaseException | None = None) -> None:  # runs on the event loop
            if msg is not None:
                failed.append((msg, exc or KafkaError("send failed")))
            left[0] -= 1
            if left[0] == 0 and not done.done():
                done.set_result(None)

        def send_all() -> None:  # on the send thread: send() may block up to max_block_ms
            for msg in messages:
                try:
                    fut = self.producer.send(msg[0], key=msg[1], value=msg[2])
                except KafkaError as exc:  # e.g. no metadata within max_block_ms: try again later
                    log.warning("cannot send to %s (%r)", msg[0], exc)
                    loop.call_soon_threadsafe(settle, msg, exc)
                    continue
                # the callbacks run on the producer's IO thread (or here): hop to the event loop
                fut.add_callback(lambda _md: loop.call_soon_threadsafe(settle, None))
                fut.add_errback(lambda e, m=msg: loop.call_soon_threadsafe(settle, m, e))

        await self._sender(send_all)
        await done
        return failed


class TransactionInDoubt(Exception):
    """A transaction neither known committed nor known aborted.

    It did not finish within its deadline, or it failed and could not be aborted.

    Not a ``KafkaError``: only the broker can settle it (:meth:`TransactionalPublisher.renew`).
    """


class TransactionalPublisher:
    """Queue finished prompts for the next transaction; own the transactional producer and its thread.

    Every producer call runs on the producer's own thread (:meth:`on_thread`), so a blocking
    transaction never stalls the event loop. A transaction gets ``deadline`` seconds
    (:meth:`transact`): kafka-python 3.0.12 can lose a transactional request for good when the
    connection to its coordinator fails (see ``checkpoint``), and then ``commit_transaction``
    waits forever. A stuck producer is replaced by :meth:`renew`.

    Args:
        new_producer: builds a producer with the worker's ``transactional_id`` (called again by
            :meth:`renew`, always with the same id).
        deadline: seconds a transaction (or any call on the producer) may take before it is given up.
    """

    def __init__(self, *, new_producer: Callable[[], Producer],
                 deadline: float = TRANSACTION_DEADLINE) -> None:
        self._new_producer = new_producer
        self.deadline = deadline
        self.producer = new_producer()
        self._thread = OneThread("kafka-txn")
        self._queue: list[Pending] = []
        self.renewals = 0
        """Producers replaced so far."""

    async def start(self) -> None:
        """Register the transactional id; this aborts what a previous instance left open."""
        await self.on_thread(self.producer.init_transactions)

    async def publish(self, messages: list[Message], done: Done, reject: Reject | None = None) -> None:
        """Queue ``messages`` for the next transaction (returns at once; ``reject`` is not used yet)."""
        self._queue.append(Pending(messages, done))

    def take(self) -> list[Pending]:
        """Everything queued, in order; the queue is left empty."""
        batch, self._queue = self._queue, []
        return batch

    def put_back(self, batch: list[Pending]) -> None:
        """Queue ``batch`` again, ahead of what was queued since (its transaction was aborted)."""
        self._queue[:0] = batch

    async def transact(self, batch: list[Pending], offsets: Offsets, consumer_group_metadata: Any) -> None:
        """One transaction: the records of ``batch`` and, when given, ``offsets`` for the group.

        Raises:
            TransactionInDoubt: it did not finish within the deadline, or could not be aborted;
                whether it committed is not known until :meth:`renew` (call it next) has
                settled it at the broker.
            ProducerFencedError: a newer producer holds the transactional id.
            KafkaError: the transaction was aborted (nothing of it is visible or committed).
        """
        await self._within_deadline("the transaction", _transact, self.producer, batch, offsets,
                                    consumer_group_metadata)

    async def renew(self) -> None:
        """Abandon the producer and register a new one under the same transactional id.

        The new producer's ``init_transactions`` bumps the id's epoch, which fences the old
        producer (the broker refuses whatever it still sends), and returns only once the broker
        has finished the old producer's open transaction: aborted it, or completed its commit if
        the commit was already prepared. So afterwards the old transaction is settled for good
        and the group's committed offsets tell which way.

        Raises:
            FatalPublishError: no new producer could register within ``RENEW_ATTEMPTS`` tries.
        """
        error: BaseException | None = None
        for attempt in range(1, RENEW_ATTEMPTS + 1):
            self._abandon()
            try:
                # building a producer connects to the cluster (it may retry for a while): not on the loop
                self.producer = await asyncio.to_thread(self._new_producer)
                self._thread = OneThread("kafka-txn")
                await self._within_deadline("init_transactions", self.producer.init_transactions)
            except (KafkaError, TransactionInDoubt) as exc:
                error = exc
                log.warning("a new transactional producer could not register (attempt %d of %d: %r)",
                            attempt, RENEW_ATTEMPTS, exc)
                await asyncio.sleep(RESEND_DELAY)
                continue
            self.renewals += 1
            log.warning("a new transactional producer took over the transactional id (the old one is "
                        "fenced; its open transaction is settled by the broker)")
            return
        raise FatalPublishError(f"cannot register a new transactional producer: {error!r}")

    async def on_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on the producer's thread."""
        return await self._thread(fn, *args, **kwargs)

    async def close(self) -> None:
        """Close the producer (an open transaction is aborted by the broker); at most the deadline."""
        try:
            await self._within_deadline("closing the producer", self.producer.close)
        except TransactionInDoubt as exc:
            log.warning("%s; leaving it behind", exc)
        self._thread.shutdown(wait=False)

    async def _within_deadline(self, what: str, fn: Callable[P, T], /, *args: P.args,
                               **kwargs: P.kwargs) -> T:
        """``fn`` on the producer's thread; TransactionInDoubt past the deadline (the call goes on there)."""
        try:
            return await asyncio.wait_for(self.on_thread(fn, *args, **kwargs), self.deadline)
        except asyncio.TimeoutError:
            raise TransactionInDoubt(f"{what} did not finish within {self.deadline:g} s") from None

    def _abandon(self) -> None:
        """Leave the producer and its thread (maybe stuck for good) behind, and close it in the background.

        The close waits for the producer's records to settle (the broker refuses them once it is
        fenced, or they expire); it runs on a daemon thread of its own, so neither the worker nor
        its exit waits for it.
        """
        producer, thread = self.producer, self._thread
        thread.shutdown(wait=False)

        def close() -> None:
            try:
                producer.close(timeout=ABANDONED_CLOSE_SECONDS)
            except Exception as exc:  # noqa: BLE001 - it is gone either way
                log.debug("closing the abandoned transactional producer failed (%r)", exc)

        threading.Thread(target=close, name="kafka-txn-abandoned", daemon=True).start()


def _transact(producer: Producer, batch: list[Pending], offsets: Offsets,
              consumer_group_metadata: Any) -> None:
    """On the producer's thread: begin, send the records and the offsets, commit (or abort).

    Only ``producer`` is touched, never the publisher's current one: a call given up on goes
    on here after a newer producer took over, and must not send anything through it.
    """
    producer.begin_transaction()
    try:
        for pending in batch:
            for topic, key, value in pending.messages:
                producer.send(topic, key=key, value=value)
        if offsets:
            producer.send_offsets_to_transaction(offsets, consumer_group_metadata)
        producer.commit_transaction()
    except ProducerFencedError:
        raise
    except KafkaError:
        try:
            producer.abort_transaction()
        except KafkaError as exc:
            raise TransactionInDoubt(f"the transaction failed ({exc!r}) and could not be aborted") from exc
        raise
