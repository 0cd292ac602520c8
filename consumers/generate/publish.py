"""How a finished prompt's records reach Kafka (when its input offset is committed is ``checkpoint``'s job).

:class:`AckedPublisher` (at least once) sends a prompt's records at once and reports the prompt
durable when the broker acknowledged all of them. :class:`TransactionalPublisher`
(``--exactly-once``) queues them for the checkpoint's next transaction, which sends them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.kafka import REFUSED_FOR_GOOD, Producer

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Message = tuple[str, "bytes | None", bytes]
"""(topic, key, value)"""
RESEND_DELAY = 1.0
"""Seconds before records that failed to publish are sent again (the worker never gives up on them)."""


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
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="kafka-send")

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
        self._sender.shutdown()

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

        await loop.run_in_executor(self._sender, send_all)
        await done
        return failed


class TransactionalPublisher:
    """Queue finished prompts for the next transaction; own the transactional producer and its thread.

    Every producer call runs on the publisher's own thread (:meth:`on_thread`), so a blocking
    transaction never stalls the event loop.

    Args:
        producer: a producer with a ``transactional_id``.
    """

    def __init__(self, *, producer: Producer) -> None:
        self.producer = producer
        self._queue: list[Pending] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kafka-txn")

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

    def send(self, batch: list[Pending]) -> None:
        """On the transaction thread, inside an open transaction: send every record of ``batch``."""
        for pending in batch:
            for topic, key, value in pending.messages:
                self.producer.send(topic, key=key, value=value)

    async def on_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on the transaction thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread,
                                                                functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        """Close the producer (an open transaction is aborted by the broker)."""
        await self.on_thread(self.producer.close)
        self._thread.shutdown()

