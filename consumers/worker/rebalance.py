"""The worker's rebalance listener; kafka-python runs it on its IO thread, so nothing here blocks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

from consumers.worker.offsets import OffsetTracker
from consumers.worker.publish import as_offsets

log = logging.getLogger(__name__)


class Rebalance(AsyncConsumerRebalanceListener):
    """Revoked: stop their work and commit their finished watermark. Assigned: fresh epochs. Lost: forget.

    Args:
        tracker: the worker's offset tracker.
        consumer: the consumer (only its non-blocking ``commit_async`` is used here).
        commit_on_revoke: False in transactional mode, where offsets are only committed
            inside transactions (a plain commit could cover records of an open transaction).
        cancel: thread-safe callable that cancels the in-flight work of a set of partitions.
    """

    def __init__(self, *, tracker: OffsetTracker, consumer: KafkaConsumer, commit_on_revoke: bool,
                 cancel: Callable[[set[Any]], Any]) -> None:
        self.tracker = tracker
        self.consumer = consumer
        self.commit_on_revoke = commit_on_revoke
        self.cancel = cancel

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Stop the partitions' work, then commit what they finished (awaited on the IO loop)."""
        revoked = set(revoked)
        commits = self.tracker.revoke(revoked)
        self.cancel(revoked)
        if commits and self.commit_on_revoke:
            try:
                await self.consumer.commit_async(as_offsets(commits))
            except Exception as exc:  # the next owner re-does that work; never fail the rebalance
                log.warning("commit on revoke of %s failed (%r)", sorted(map(str, revoked)), exc)
        log.info("revoked %d partitions (committed %s)", len(revoked), commits or "nothing new")

    async def on_partitions_assigned(self, assigned: Any) -> None:
        """Track newly assigned partitions under fresh epochs."""
        self.tracker.assign(set(assigned))
        log.info("assigned %s", sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))

    async def on_partitions_lost(self, lost: Any) -> None:
        """The group moved on without us: forget the partitions, commit nothing."""
        lost = set(lost)
        self.tracker.revoke(lost)
        self.cancel(lost)
        log.warning("lost %d partitions; their in-flight work will be re-done by their new owner", len(lost))
