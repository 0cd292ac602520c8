"""How finished prompts reach Kafka and when their input offsets count as finished.

:class:`AckedPublisher` (at least once): a prompt's records are sent at once; its offset is
finished when the broker acknowledged all of them, and the finished watermark is committed
through the consumer every commit interval.

:class:`TransactionalPublisher` (``--exactly-once``): finished prompts are gathered, and every
commit interval one Kafka transaction publishes their records and commits the input offsets
(``send_offsets_to_transaction`` with the consumer's group metadata, so a member fenced by a
rebalance cannot commit). An aborted transaction is retried with the same prompts; their
offsets count as finished only once the transaction committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError, ProducerFencedError
from kafka.structs import OffsetAndMetadata

from consumers.worker.offsets import Commit, OffsetTracker
from eaglefeed.errors import EaglefeedError

log = logging.getLogger(__name__)

Message = tuple[str, "bytes | None", bytes]
"""(topic, key, value)"""
CommitFn = Callable[[dict[Any, OffsetAndMetadata]], Awaitable[None]]


@dataclass(frozen=True)
class Done:
    """A prompt's input record: partition, offset and the assignment epoch it was started under."""

    tp: Any
    offset: int
    epoch: int


class FatalPublishError(EaglefeedError):
    """Publishing cannot go on (e.g. this producer was fenced by a newer instance)."""


def as_offsets(commits: dict[Any, Commit]) -> dict[Any, OffsetAndMetadata]:
    """kafka-python's form of tracker commits."""
    return {tp: OffsetAndMetadata(offset, meta, -1) for tp, (offset, meta) in commits.items()}


class AckedPublisher:
    """Publish at once, finish on acknowledgement, commit through the consumer.

    Args:
        producer: an idempotent producer.
        tracker: the offset tracker to finish offsets in.
        commit: awaitable that commits offsets through the consumer (on its thread).
    """

    def __init__(self, *, producer: KafkaProducer, tracker: OffsetTracker, commit: CommitFn) -> None:
        self.producer = producer
        self.tracker = tracker
        self._commit = commit

    async def start(self) -> None:
        """Nothing to prepare."""

    async def publish(self, messages: list[Message], done: Done) -> None:
        """Send ``messages``, wait until the broker has them all, then finish ``done``."""
        while messages:
            messages = await self._send_all(messages)
            if messages:
                log.warning("%d records failed to publish; re-sending", len(messages))
                await asyncio.sleep(1.0)
        self.tracker.finish(done.tp, done.offset, done.epoch)

    async def commit(self) -> None:
        """Commit the finished watermark (and the offsets done above it)."""
        commits = self.tracker.committable()
        if commits:
            await self._commit(as_offsets(commits))
            self.tracker.mark_committed(commits)

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
            fut.add_callback(lambda _md: loop.call_soon_threadsafe(settle, None))
            fut.add_errback(lambda _e, m=msg: loop.call_soon_threadsafe(settle, m))
        await done
        return failed


class TransactionalPublisher:
    """Gather finished prompts; publish them and commit their offsets in one transaction.

    Args:
        producer: a producer with a ``transactional_id``.
        tracker: the offset tracker.
        group_metadata: awaitable returning ``consumer.group_metadata()`` (from the consumer's thread).
        on_transaction: called with ``committed`` or ``aborted`` after each transaction.
    """

    def __init__(self, *, producer: KafkaProducer, tracker: OffsetTracker,
                 group_metadata: Callable[[], Awaitable[Any]],
                 on_transaction: Callable[[str], None] | None = None) -> None:
        self.producer = producer
        self._on_transaction = on_transaction or (lambda _o: None)
        self.tracker = tracker
        self._group_metadata = group_metadata
        self._batch: list[tuple[list[Message], Done]] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kafka-txn")

    async def start(self) -> None:
        """Register the transactional id; this aborts what a previous instance left open."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self.producer.init_transactions)

    async def publish(self, messages: list[Message], done: Done) -> None:
        """Queue ``messages`` for the next transaction."""
        self._batch.append((messages, done))

    def pending(self) -> int:
        """Prompts waiting for the next transaction."""
        return len(self._batch)

    async def commit(self) -> None:
        """Run one transaction over the gathered prompts and the offsets they complete.

        1. drop prompts of partitions revoked since they started;
        2. compute the commits as if they were finished;
        3. begin; send every record; send the offsets with the group metadata; commit;
        4. only then finish their offsets in the tracker. On an abortable error the
           transaction is aborted and the prompts wait for the next one.
        """
        loop = asyncio.get_running_loop()
        batch = [(m, d) for m, d in self._batch if self.tracker.is_current(d.tp, d.epoch)]
        self._batch = []
        extra: dict[Any, list[int]] = {}
        for _m, d in batch:
            extra.setdefault(d.tp, []).append(d.offset)
        commits = self.tracker.committable(extra)
        if not batch and not commits:
            return
        metadata = await self._group_metadata() if commits else None
        try:
            await loop.run_in_executor(self._thread, self._transact, batch, commits, metadata)
        except ProducerFencedError as exc:
            raise FatalPublishError(f"producer fenced: {exc}") from exc
        except KafkaError as exc:
            log.warning("transaction aborted (%r); its %d prompts go into the next one", exc, len(batch))
            self._on_transaction("aborted")
            self._batch[:0] = batch
            return
        self._on_transaction("committed")
        for _m, d in batch:
            self.tracker.finish(d.tp, d.offset, d.epoch)
        self.tracker.mark_committed(commits)

    async def close(self) -> None:
        """Close the producer (an open transaction is aborted by the broker)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self.producer.close)
        self._thread.shutdown()

    def _transact(self, batch: list[tuple[list[Message], Done]], commits: dict[Any, Commit],
                  metadata: Any) -> None:
        producer = self.producer
        producer.begin_transaction()
        try:
            for messages, _d in batch:
                for topic, key, value in messages:
                    producer.send(topic, key=key, value=value)
            if commits:
                producer.send_offsets_to_transaction(as_offsets(commits), metadata)
            producer.commit_transaction()
        except ProducerFencedError:
            raise
        except KafkaError:
            try:
                producer.abort_transaction()
            except KafkaError as exc:
                raise FatalPublishError(f"cannot abort the transaction: {exc!r}") from exc
            raise
