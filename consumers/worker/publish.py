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

from eaglefeed.kafka import Producer

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Message = tuple[str, "bytes | None", bytes]
"""(topic, key, value)"""
RESEND_DELAY = 1.0
"""Seconds before records that failed to publish are sent again (the worker never gives up on them)."""


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

    async def publish(self, messages: list[Message], done: Done) -> None:
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

    async def start(self) -> None:
        """Nothing to prepare."""

    async def publish(self, messages: list[Message], done: Done) -> None:
        """Send ``messages`` until the broker has them all (re-sending failures), then report ``done``."""
        while messages:
            messages = await self._send_all(messages)
            if messages:
                log.warning("%d records failed to publish; re-sending", len(messages))
                await asyncio.sleep(RESEND_DELAY)
        self._on_durable(done)

    async def close(self) -> None:
        """Flush and close the producer."""
        await asyncio.to_thread(self.producer.close)

    async def _send_all(self, messages: list[Message]) -> list[Message]:
        """Send and wait for every acknowledgement; return the messages that failed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        failed: list[Message] = []
        left = [len(messages)]

        def settle(msg: Message | None) -> None:  # runs on the event loop
            if msg is not None:
                failed.append(msg)
            left[0] -= 1
            if left[0] == 0 and not done.done():
                done.set_result(None)

        for msg in messages:
            try:
                fut = self.producer.send(msg[0], key=msg[1], value=msg[2])
            except KafkaError as exc:  # e.g. no metadata within max_block_ms: try again later
                log.warning("cannot send to %s (%r)", msg[0], exc)
                settle(msg)
                continue
            # the callbacks run on the producer's IO thread: hop to the event loop
            fut.add_callback(lambda _md: loop.call_soon_threadsafe(settle, None))
            fut.add_errback(lambda _e, m=msg: loop.call_soon_threadsafe(settle, m))
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

    async def publish(self, messages: list[Message], done: Done) -> None:
        """Queue ``messages`` for the next transaction (returns at once)."""
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

