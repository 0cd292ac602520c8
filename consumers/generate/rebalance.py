"""The worker's group membership: its rebalance listener and the two holds a membership change needs.

- :class:`Rebalance`, the listener: kafka-python runs it on its IO thread, so nothing in it blocks.
- :class:`SettleHold`: newly assigned partitions wait until the group has settled.
- :class:`StallGuard`: after the worker stood still past its session timeout, results wait until
  the group is known again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.checkpoint import Commits, GenerateCheckpoint
from eaglefeed.core.clients import Consumer, partition_name, partition_names

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
        log.info("%s", revoked_line(revoked, commits, committed=committed, closing=self.checkpoint.closing))

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


def revoked_line(revoked: Collection[TopicPartition], commits: Commits, *, committed: bool,
                 closing: bool) -> str:
    """What a revocation did, in a person's words.

    Args:
        revoked: the partitions given back.
        commits: what was left to commit for them (empty: the last commit covered everything).
        committed: whether ``commits`` were committed.
        closing: the worker is stopping (it closed its consumer), not moving partitions in a rebalance.
    """
    count = f"{len(revoked)} partition{'' if len(revoked) == 1 else 's'}"
    what = f"stopped: handed back {count}" if closing else f"the group moved {count} to other members"
    what += f" ({partition_names(revoked)})"
    if not commits:
        return f"{what}; everything finished was {'committed' if closing else 'already committed'}"
    if committed:
        done = ", ".join(f"{partition_name(tp)} at offset {offset}"
                         for tp, (offset, _meta) in sorted(commits.items()))
        return f"{what}; committed what they finished ({done})"
    return (f"{what}; what finished since the last commit of {partition_names(commits)} is not committed: "
            "its next owner generates it again")


# Hold newly assigned partitions until the group has settled, so a start-up rebalance cancels no work.
#
# Workers started together do not join the group together: the first member is given every
# partition and fills its request window at once, and when the second one's join reaches it (at
# its next heartbeat, up to two seconds later) half of those partitions are revoked and their
# in-flight requests cancelled; their new owner sends them again (GPU work paid twice). So a
# partition this member was just given is paused until the member's assignment has stayed
# unchanged for ``seconds``: a join that was about to happen moves the partition before anything
# of it was sent. Partitions the member keeps through a rebalance are not held again.
#
# :meth:`SettleHold.assigned` and :meth:`SettleHold.revoked` are called by the rebalance listener
# (kafka-python's IO thread), :meth:`SettleHold.held` by the consumer thread: a lock guards the state.

log = logging.getLogger(__name__)


class SettleHold:
    """Which partitions must not be fetched yet: assigned less than ``seconds`` after the last change.

    Args:
        seconds: how long the assignment must stay unchanged before new partitions are fetched
            (0: never hold).
        clock: monotonic seconds.
    """

    def __init__(self, *, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._held: set[TopicPartition] = set()
        self._changed = clock()

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        """Partitions were assigned: hold them, and the assignment changed now."""
        with self._lock:
            self._changed = self._clock()
            if self.seconds > 0:
                self._held.update(partitions)

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        """Partitions were revoked or lost: the assignment changed now (the group is still moving)."""
        with self._lock:
            self._changed = self._clock()
            self._held.difference_update(partitions)

    def held(self) -> set[TopicPartition]:
        """The partitions still held; those whose hold is over are released (and not returned again)."""
        with self._lock:
            if self._held and self._clock() - self._changed >= self.seconds:
                log.info("the group settled: fetching %d newly assigned partitions", len(self._held))
                self._held.clear()
            return set(self._held)


# Notice that the worker stood still past its session timeout; hold its results until the group is known.
#
# A worker that was paused (SIGSTOP, a long swap or GC pause) for longer than its group session
# timeout wakes up with prompts in flight whose partitions the group has given to another member:
# their responses are already waiting in its sockets and would be published at once, before
# kafka-python's next heartbeat tells the consumer its membership expired. The other member
# generates the same prompts again, so each of them would be published twice (the sink keeps one
# row, but the work is paid twice). After such a gap, results wait one heartbeat round trip; then
# only those of partitions still ours under the same assignment are published.

log = logging.getLogger(__name__)

HOLD_SECONDS = 3.0
"""How long results wait after a stall: a heartbeat (every 2 s, ``eaglefeed.core.kafka``) and its answer."""


class StallGuard:
    """Measure the gaps between the worker loop's turns; after one past ``after`` seconds, hold results.

    Args:
        after: the gap that counts as a stall (the group session timeout).
        hold: how long results wait after a stall (default :data:`HOLD_SECONDS`).
        clock: monotonic seconds (it keeps counting while the process is stopped).
    """

    def __init__(self, *, after: float, hold: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.after = after
        self.hold = HOLD_SECONDS if hold is None else hold
        self._clock = clock
        self._last = clock()
        self._hold_until = float("-inf")
        self.stalls = 0

    def tick(self) -> None:
        """One turn of the worker loop."""
        self._check()
        self._last = self._clock()

    async def settle(self) -> bool:
        """Before publishing: after a stall, wait out the hold. True if this result waited."""
        self._check()
        wait = self._hold_until - self._clock()
        if wait <= 0:
            return False
        await asyncio.sleep(wait)
        return True

    def _check(self) -> None:
        now = self._clock()
        gap = now - self._last
        if gap > self.after and now >= self._hold_until:  # a stall not noticed yet
            self.stalls += 1
            self._hold_until = now + self.hold
            self._last = now
            log.warning("the worker stood still for %.1fs (past its %.0fs session timeout): results wait "
                        "%.0fs, then only those of partitions still ours are published", gap, self.after,
                        self.hold)
