"""The converse stage's rebalance listener, and the watch that re-joins a group join left unfinished.

Nothing is handed over on a rebalance: every processed record is committed before the next
``poll()``, the only call in which partitions move.

Why the watch: subscribed to two topics, the stage sees a second rebalance right after its first
assignment when the topics are new (kafka-python 3.0.12 finds the subscription's metadata
changed), and that rejoin was seen to never finish: the member sat without partitions (2 starts
in 8 with a synchronous listener; still seen, more rarely, with this asynchronous one). A proper
rebalance always ends in ``on_partitions_assigned`` (with an empty set for a member that gets
nothing), so a revocation not followed by any assignment for ``REJOIN_SECONDS`` means the join
is stuck, and the loop subscribes again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

log = logging.getLogger(__name__)

REJOIN_SECONDS = 45.0  # longer than a session timeout (20 s): a slow but live rebalance finishes first


class Rebalance(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
    """Log partition moves and note when a revocation is still waiting for its assignment.

    Args:
        clock: the monotonic clock (a test can pass its own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.waiting_since: float | None = None  # revoked, and no assignment since

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Nothing is pending when poll() revokes partitions."""
        log.info("revoked %d partitions (everything processed was committed)", len(revoked))
        self.waiting_since = self._clock()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        """Start at the group's committed offsets."""
        log.info("assigned %s", sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))
        self.waiting_since = None

    def stuck(self, now: float | None = None) -> bool:
        """Whether a revocation has waited ``REJOIN_SECONDS`` for its assignment (the clock restarts)."""
        if self.waiting_since is None:
            return False
        now = self._clock() if now is None else now
        if now - self.waiting_since < REJOIN_SECONDS:
            return False
        log.warning("no partitions assigned for %.0fs after a revocation: joining the group again",
                    REJOIN_SECONDS)
        self.waiting_since = now
        return True
