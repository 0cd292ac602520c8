"""The worker's rebalance listener; kafka-python runs it on its IO thread, so nothing here blocks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.checkpoint import GenerateCheckpoint
from eaglefeed.consumers.generate.settle import SettleHold
from eaglefeed.core.clients import Consumer

log = logging.getLogger(__name__)


class Rebalance(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Revoked: stop their work, commit their finished watermark. Assigned: fresh epochs. Lost: forget.

    A partition revoked under another group membership than the one it was assigned under is
    treated as lost: our session expired in between (the process was paused or stalled) and the
    group gave it to another member, which has committed past our watermark since. kafka-python
    3.0.12 then rejoins under a new member id and reports such partitions *revoked*, and
    committing our stale watermark would move the group's offset back (its prompts generated
    again).

    Args:
        checkpoint: tracks the partitions and commits what revoked ones finished.
        cancel: thread-safe callable that cancels the in-flight work of a set of partitions.
        hold: pauses newly assigned partitions until the group settled (None: never hold).
    """

    def __init__(self, *, checkpoint: GenerateCheckpoint,
                 cancel: Callable[[set[TopicPartition]], Any], hold: SettleHold | None = None) -> None:
        self.checkpoint = checkpoint
        self.cancel = cancel
        self.hold = hold
        self._member_at: dict[TopicPartition, str | None] = {}  # the membership each was assigned under

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Stop the partitions' work, then commit what they finished (awaited on the IO loop)."""
        member = self._member()
        stale = {tp for tp in revoked if self._member_at.get(tp) not in (None, member)}
        for tp in revoked:
            self._member_at.pop(tp, None)
        if stale:
            log.warning("%d revoked partitions were assigned under an expired membership: treated as lost",
                        len(stale))
            await self.on_partitions_lost(stale)
        revoked = set(revoked) - stale
        if self.hold is not None:
            self.hold.revoked(revoked)
        if not revoked:
            return
        commits = self.checkpoint.revoke(revoked)
        self.cancel(revoked)
        committed = await self.checkpoint.commit_revoked(commits)
        log.info("revoked %d partitions (committed %s)", len(revoked),
                 commits if committed else "nothing new")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Track newly assigned partitions under fresh epochs; hold them until the group settled."""
        self.checkpoint.assign(assigned)
        if self.hold is not None and self.hold.seconds > 0 and assigned:
            self.hold.assigned(assigned)  # before the pause: the consumer thread never resumes them early
            self.checkpoint.consumer.pause(*assigned)  # before their first fetch (a flag, safe here)
        member = self._member()
        for tp in assigned:
            self._member_at[tp] = member
        log.info("assigned %s", sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The group moved on without us: forget the partitions, commit nothing."""
        lost = set(lost)
        for tp in lost:
            self._member_at.pop(tp, None)
        if self.hold is not None:
            self.hold.revoked(lost)
        self.checkpoint.lose(lost)
        self.cancel(lost)
        log.warning("lost %d partitions; their in-flight work will be re-done by their new owner", len(lost))

    def rejoin(self, consumer: Consumer, subscribe: Callable[[], None]) -> None:
        """Leave the group and join again (the stall watchdog's second step), on the consumer thread.

        kafka-python 3.0.12's ``unsubscribe()`` calls no listener, so what this member held is
        given up as lost first: nothing more is committed for it (under ``--exactly-once`` too),
        and its next owner redoes what was in flight.
        """
        held = set(consumer.assignment())
        if held:
            asyncio.run(self.on_partitions_lost(held))
        consumer.unsubscribe()
        subscribe()

    def _member(self) -> str | None:
        """Our current member id in the group (None when the consumer cannot say)."""
        try:
            return str(self.checkpoint.consumer.group_metadata().member_id)
        except Exception:  # noqa: BLE001 - without it every revoke commits, as before
            return None
