"""The worker's rebalance listener; kafka-python runs it on its IO thread, so nothing here blocks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.structs import TopicPartition

from consumers.worker.checkpoint import Checkpoint

log = logging.getLogger(__name__)


class Rebalance(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Revoked: stop their work, commit their finished watermark. Assigned: fresh epochs. Lost: forget.

    Args:
        checkpoint: tracks the partitions and commits what revoked ones finished.
        cancel: thread-safe callable that cancels the in-flight work of a set of partitions.
    """

    def __init__(self, *, checkpoint: Checkpoint, cancel: Callable[[set[TopicPartition]], Any]) -> None:
        self.checkpoint = checkpoint
        self.cancel = cancel

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Stop the partitions' work, then commit what they finished (awaited on the IO loop)."""
        revoked = set(revoked)
        commits = self.checkpoint.revoke(revoked)
        self.cancel(revoked)
        committed = await self.checkpoint.commit_revoked(commits)
        log.info("revoked %d partitions (committed %s)", len(revoked),
                 commits if committed else "nothing new")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Track newly assigned partitions under fresh epochs."""
        self.checkpoint.assign(assigned)
        log.info("assigned %s", sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The group moved on without us: forget the partitions, commit nothing."""
        lost = set(lost)
        self.checkpoint.lose(lost)
        self.cancel(lost)
        log.warning("lost %d partitions; their in-flight work will be re-done by their new owner", len(lost))
