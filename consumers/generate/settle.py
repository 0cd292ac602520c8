"""Hold newly assigned partitions until the group has settled, so a start-up rebalance cancels no work.

Workers started together do not join the group together: the first member is given every
partition and fills its request window at once, and when the second one's join reaches it (at
its next heartbeat, up to two seconds later) half of those partitions are revoked and their
in-flight requests cancelled; their new owner sends them again (GPU work paid twice). So a
partition this member was just given is paused until the member's assignment has stayed
unchanged for ``seconds``: a join that was about to happen moves the partition before anything
of it was sent. Partitions the member keeps through a rebalance are not held again.

:meth:`SettleHold.assigned` and :meth:`SettleHold.revoked` are called by the rebalance listener
(kafka-python's IO thread), :meth:`SettleHold.held` by the consumer thread: a lock guards the state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from kafka.structs import TopicPartition

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
