"""The only place the generate worker commits input offsets, or reads where a partition resumes.

Work finishes out of order; ``eaglefeed.consumers.generate.offsets`` decides which offsets a commit may
cover (one past the contiguous finished prefix: the watermark + 1), and the offsets finished
above it travel in the commit's metadata (``eaglefeed.consumers.generate.offsets``) so the next
owner of the partition skips them.

At least once (:class:`GenerateCheckpoint`):
    1. publish: a finished prompt's records are sent at once (``AckedPublisher``);
    2. the broker acknowledges every one of them; only then is the prompt's offset finished
       (:meth:`GenerateCheckpoint.finished`);
    3. every commit interval, commit each partition's watermark + 1 with its done-offset
       metadata through the consumer. When partitions are revoked, step 3 runs for them at once
       (``commit_async``, from the rebalance listener); lost partitions commit nothing.

Exactly once (``--exactly-once``, :class:`TransactionalGenerateCheckpoint`):
    1. publish: a finished prompt's records are queued (``TransactionalPublisher``);
    2. every commit interval, one transaction: drop the queued prompts of partitions revoked
       since they started; begin; send their records;
    3. in the same transaction, send each partition's watermark + 1 (counting the queued prompts
       as finished) with its done-offset metadata and the consumer's group metadata (a member
       fenced by a rebalance cannot commit); commit the transaction; only then are the prompts
       finished in the tracker. An aborted transaction is retried with the same prompts.
       Nothing is committed on revocation: a plain commit could cover records of an open
       transaction.
    4. a transaction that does not finish within ``--transaction-deadline`` is *in doubt*
       (so is one that failed and could not be aborted): its producer is abandoned and a new one
       registers the same transactional id, which fences the old one and makes the broker finish
       its transaction (abort it, or complete a commit already prepared); then the group's
       committed offsets tell which way it went. Committed: its prompts are finished, never sent
       again. Aborted: they go into the next transaction. No other transaction starts meanwhile.
       Why: kafka-python 3.0.12 can lose a transactional request for good when the connection
       to the transaction coordinator fails (``Sender._maybe_send_pending_request``: the
       exception raised by ``await_ready`` re-queues a coordinator lookup but not the request),
       and ``commit_transaction`` waits for it without a timeout: a worker whose transaction
       coordinator was SIGKILLed stood still for good (``leader-kill-eos``).

Before a newly assigned partition's first record is dispatched, its committed offset and
metadata are read (:meth:`GenerateCheckpoint.load_committed`): the metadata lists offsets to skip.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from kafka.errors import KafkaError, ProducerFencedError, RebalanceInProgressError
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.consumers.generate.offsets import Commit, OffsetTracker
from eaglefeed.consumers.generate.publish import Done, Pending, TransactionalPublisher, TransactionInDoubt
from eaglefeed.core.clients import Consumer, partition_name, partition_names
from eaglefeed.core.errors import FatalPublishError

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Commits = Mapping[TopicPartition, Commit]
COMMITTED_TIMEOUT_MS = 10_000
"""How long reading a new partition's committed offset may block the consumer thread (kafka-python
waits forever without it); past it the partition starts with nothing to skip (work may be redone,
never lost)."""


class OnThread(Protocol):
    """Runs a blocking call on a given thread (here: the consumer's) and awaits its result."""

    def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
        """Run ``fn(*args, **kwargs)`` there."""


def as_offsets(commits: Commits) -> dict[TopicPartition, OffsetAndMetadata]:
    """kafka-python's form of tracker commits."""
    return {tp: OffsetAndMetadata(offset, meta, -1) for tp, (offset, meta) in commits.items()}


class GenerateCheckpoint:
    """At least once: commit the finished watermark through the consumer.

    Args:
        tracker: the offset tracker (the loop starts offsets in it).
        consumer: the worker's consumer.
        on_consumer: runs a call on the consumer's thread.
    """

    def __init__(self, *, tracker: OffsetTracker, consumer: Consumer, on_consumer: OnThread) -> None:
        self.tracker = tracker
        self.consumer = consumer
        self._on_consumer = on_consumer
        self.closing = False
        """Set by the worker before it closes the consumer: revocations from then on are it leaving."""

    # --- called by the rebalance listener, on kafka-python's IO thread ---------------------------
    def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Track newly assigned partitions under fresh epochs."""
        self.tracker.assign(set(partitions))

    def revoke(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, Commit]:
        """Stop tracking ``partitions`` (later finishes are never committed); return their last commits."""
        return self.tracker.revoke(set(partitions))

    async def commit_revoked(self, commits: Commits) -> bool:
        """Step 3 for revoked partitions, without blocking the IO loop; True if it committed."""
        if not commits:
            return False
        try:
            await self.consumer.commit_async(as_offsets(commits))
        except Exception as exc:  # noqa: BLE001 - the next owner re-does that work; never fail the rebalance
            log.warning("commit on revoke of %s failed (%r)", partition_names(commits), exc)
            return False
        return True

    def lose(self, partitions: Collection[TopicPartition]) -> None:
        """Forget partitions the group gave away without us: nothing of theirs is committed."""
        self.tracker.revoke(set(partitions))

    # --- on the consumer's thread ------------------------------------------------------------------
    def load_committed(self) -> None:
        """Read the committed offset and done-offset metadata of partitions that were just assigned."""
        for tp in self.tracker.needs_committed():
            try:
                committed = self.consumer.committed(tp, metadata=True, timeout_ms=COMMITTED_TIMEOUT_MS)
            except KafkaError as exc:
                log.warning("cannot read the committed offset of %s (%r): nothing to skip",
                            partition_name(tp), exc)
                committed = None
            self.tracker.load_committed(tp, committed.offset if committed else None,
                                        committed.metadata if committed else None)

    # --- on the event loop -------------------------------------------------------------------------
    def finished(self, done: Done) -> None:
        """Step 2: every record of the prompt ``done`` is acknowledged."""
        self.tracker.finish(done.tp, done.offset, done.epoch)

    async def commit(self) -> None:
        """Commit what is committable now; a failed commit is logged and retried on the next call.

        Raises:
            FatalPublishError: the transactional producer cannot go on.
        """
        try:
            await self._commit()
        except RebalanceInProgressError:
            log.debug("commit deferred: the group is rebalancing")
        except KafkaError as exc:
            log.warning("offset commit failed (%r); will retry", exc)

    async def _commit(self) -> None:
        """Step 3."""
        commits = self.tracker.committable()
        if commits:
            await self._on_consumer(self.consumer.commit, as_offsets(commits))
            self.tracker.mark_committed(commits)


class TransactionalGenerateCheckpoint(GenerateCheckpoint):
    """Exactly once: each commit is one transaction that publishes the queued prompts and commits offsets.

    Args:
        tracker: the offset tracker.
        consumer: the worker's consumer (its group metadata fences the transaction).
        on_consumer: runs a call on the consumer's thread.
        publisher: the queue of finished prompts, and the transactional producer.
        on_transaction: called with ``committed`` or ``aborted`` after each transaction, and
            with ``in_doubt`` for one given up on (then once more, when settled, with the outcome).
        on_committed: called with the prompts of each committed transaction: their records are
            durable only now (the worker's index of durable generation ids learns them here).
    """

    def __init__(self, *, tracker: OffsetTracker, consumer: Consumer, on_consumer: OnThread,
                 publisher: TransactionalPublisher,
                 on_transaction: Callable[[str], None] | None = None,
                 on_committed: Callable[[list[Pending]], None] | None = None) -> None:
        super().__init__(tracker=tracker, consumer=consumer, on_consumer=on_consumer)
        self.publisher = publisher
        self._on_transaction = on_transaction or (lambda _o: None)
        self._on_committed = on_committed or (lambda _b: None)
        self._in_doubt: _InDoubt | None = None

    async def commit_revoked(self, commits: Commits) -> bool:
        """Never: offsets are only committed inside transactions."""
        return False

    async def _commit(self) -> None:
        """Steps 2-3 over the queued prompts; on an abortable error they wait for the next call.

        A transaction in doubt is settled first, and no other starts until it is: a new
        transaction's offsets, counted as if the doubtful one had aborted, could move the
        group's offsets back behind what it committed.
        """
        if self._in_doubt is not None and not await self._settle():
            return
        batch = [p for p in self.publisher.take() if self.tracker.is_current(p.done.tp, p.done.epoch)]
        extra: dict[TopicPartition, list[int]] = {}
        for p in batch:
            extra.setdefault(p.done.tp, []).append(p.done.offset)
        commits = self.tracker.committable(extra)
        if not batch and not commits:
            return
        try:
            metadata = await self._on_consumer(self.consumer.group_metadata) if commits else None
            await self.publisher.transact(batch, as_offsets(commits), metadata)
        except ProducerFencedError as exc:
            raise FatalPublishError(f"producer fenced: {exc}") from exc
        except TransactionInDoubt as exc:
            log.warning("%s: replacing the producer, then reading the group's offsets to tell whether "
                        "its %d prompts committed", exc, len(batch))
            self._on_transaction("in_doubt")
            self._in_doubt = _InDoubt(batch, commits)
            await self._settle()
            return
        except KafkaError as exc:
            log.warning("transaction aborted (%r); its %d prompts go into the next one", exc, len(batch))
            self._on_transaction("aborted")
            self.publisher.put_back(batch)
            return
        self._committed(batch, commits)

    def _committed(self, batch: list[Pending], commits: Commits) -> None:
        """The transaction of ``batch`` and ``commits`` committed: its prompts are finished."""
        self._on_transaction("committed")
        self._on_committed(batch)
        for p in batch:
            self.tracker.finish(p.done.tp, p.done.offset, p.done.epoch)
        self.tracker.mark_committed(commits)

    async def _settle(self) -> bool:
        """Settle the transaction in doubt; True once it is (False: try again on the next commit).

        A new producer under the same transactional id makes the broker finish the old
        transaction (:meth:`TransactionalPublisher.renew`). Then the group's committed offsets
        say which way it went: the transaction carried ``commits``, all of them or none, so it
        committed exactly when the group holds one of them now (each differs from what was
        committed before, or it would not have been sent). Committed: its prompts are finished,
        and re-sending them would publish them twice. Aborted: they go into the next transaction.
        No committed offset can be read while the coordinator is away: then the next call asks again.

        Raises:
            FatalPublishError: no new producer could take over the transactional id.
        """
        doubt = self._in_doubt
        assert doubt is not None
        if not doubt.renewed:
            await self.publisher.renew()
            doubt.renewed = True
        if not doubt.commits:  # nothing to tell by (never met: every queued prompt changes a commit)
            log.warning("the transaction in doubt carried no offsets: its %d prompts are sent again "
                        "(the sink drops what reached it twice)", len(doubt.batch))
            committed = False
        else:
            try:
                now = await self._on_consumer(self._read_committed, list(doubt.commits))
            except KafkaError as exc:
                log.warning("cannot read the group's offsets to settle the transaction in doubt (%r); "
                            "will try again", exc)
                return False
            committed = any(now.get(tp) == commit for tp, commit in doubt.commits.items())
        self._in_doubt = None
        log.warning("the transaction in doubt had %s", "committed" if committed else
                    f"aborted: its {len(doubt.batch)} prompts go into the next one")
        if committed:
            self._committed(doubt.batch, doubt.commits)
        else:
            self._on_transaction("aborted")
            self.publisher.put_back(doubt.batch)
        return True

    def _read_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Commit | None]:
        """On the consumer's thread: the group's committed offset and metadata of ``partitions``.

        The consumer reads ``read_committed``, so kafka-python asks with ``require_stable``: an
        offset commit of a transaction still being completed is waited for, never read half-done.
        """
        out: dict[TopicPartition, Commit | None] = {}
        for tp in partitions:
            found = self.consumer.committed(tp, metadata=True, timeout_ms=COMMITTED_TIMEOUT_MS)
            out[tp] = (found.offset, found.metadata or "") if found is not None else None
        return out


@dataclass
class _InDoubt:
    """A transaction neither known committed nor known aborted: its prompts and the offsets it carried."""

    batch: list[Pending]
    commits: Commits
    renewed: bool = False  # a new producer took over (so the broker has settled the transaction)
