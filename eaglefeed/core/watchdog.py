"""Notice a stage whose consumer quietly stopped reading a partition, and recover: seek, join again, exit.

The failure users of a long ingest fear most is not a lost row but a stage that silently stops
making progress. The shape seen here (issue 26) and in kafka-python's tracker: an assigned
partition the stage has not paused returns no record for minutes while records wait past its
position (``prompts-2`` sat at offset 52 of 3,314 after a rebalance, the worker's log silent;
kafka-python #3106 and #3131 describe partitions whose fetch state never becomes fetchable again).

Each further ``after`` seconds the stall lasts, the watchdog takes the next step, logging one line
and counting it (``eaglefeed_<stage>_stall_recoveries_total{action}``):

1. ``seek``: each stuck partition is sought to its own position, which resets its fetch state
   (never back past work in flight or buffered: nothing is read twice);
2. ``rejoin``: the stage leaves the group and subscribes again (the caller's ``rejoin``);
3. ``exit``: :class:`~eaglefeed.core.errors.StageStalledError`, so that a supervisor starts the
   stage again (what finished was committed; the rest is read again by the next owner).

A record from a stuck partition, or every stuck partition found read to its end (or moved to
another member), starts the steps over.
Quiet is what the stage saw while it polled: when two polls are further apart than ``after`` (the
stage itself was stopped, in a GC pause or a blocking call), the count starts again at the later.
A member that holds no partition is not watched here: a group with more members than partitions
leaves some idle on purpose, and only the rebalance listener knows whether a join finished (the
converse stage's listener re-joins a join left unfinished: ``eaglefeed.consumers.converse.rebalance``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.clients import Consumer, Record
from eaglefeed.core.config import STALL_SECONDS
from eaglefeed.core.errors import StageStalledError
from eaglefeed.core.resume import release_parked

log = logging.getLogger(__name__)

__all__ = ["ACTIONS", "STALL_SECONDS", "StallWatchdog"]

ACTIONS = ("seek", "rejoin", "exit")

Unread: TypeAlias = "dict[TopicPartition, tuple[int | None, int]]"
"""Stuck partitions: where each stands (None: not known) and where it ends."""


class StallWatchdog:
    """Watch a stage's consumer after each poll; recover a stuck partition in steps (see the module).

    Call :meth:`observe` on the consumer's thread after every poll. It measures positions and end
    offsets only of partitions that have been quiet for ``after`` seconds, at most every
    ``check_every`` seconds.

    Args:
        stage: the stage's name, for the log lines.
        after: seconds a stall lasts before each step (None or 0: never watch).
        rejoin: leaves the group and subscribes again (step 2).
        count: called with the action's name each time a step is taken (a metric).
        clock: monotonic seconds (a test can pass its own).
        check_every: seconds between measurements of quiet partitions (default: ``after`` / 4, at most 5 s).
    """

    def __init__(self, *, stage: str, after: float | None, rejoin: Callable[[], None],
                 count: Callable[[str], None] = lambda action: None,
                 clock: Callable[[], float] = time.monotonic, check_every: float | None = None) -> None:
        self.stage = stage
        self.after = after or None
        self._rejoin = rejoin
        self._count = count
        self._clock = clock
        self.check_every = check_every if check_every is not None else min(5.0, (after or 4.0) / 4)
        self._heard: dict[TopicPartition, float] = {}  # when each partition last returned records
        self._last_check = float("-inf")
        self._observed: float | None = None  # when observe() last ran
        self.steps = 0  # steps taken in the current stall
        self._stalled: set[TopicPartition] = set()  # its stuck partitions
        self._at_end: set[TopicPartition] = set()  # quiet partitions read to their end at the last look

    def observe(self, consumer: Consumer, batch: Mapping[TopicPartition, Sequence[Record]],
                now: float | None = None) -> None:
        """After a poll: note what returned records; take the next step if the stage has stalled.

        Raises:
            StageStalledError: the stall outlasted the seek and the re-join.
        """
        now = self._clock() if now is None else now
        if self.after is not None and self._observed is not None and now - self._observed > self.after:
            # The stage itself stood still for longer than a stall (SIGSTOP, a long GC pause, a
            # blocking call): it asked for no record meanwhile, so its partitions' silence says
            # nothing. Without this, a stage woken from a 34 s SIGSTOP sought every partition at
            # once (the nemesis scenario, issue 26). Quiet is counted again from now.
            self._heard = dict.fromkeys(self._heard, now)
        self._observed = now
        assigned = consumer.assignment()
        paused = consumer.paused()
        self._heard = {tp: self._heard.get(tp, now) for tp in assigned}  # a new partition starts now
        for tp in (*batch, *paused):  # a partition the stage paused is not stuck: it was not asked
            if tp in self._heard:
                self._heard[tp] = now
        if self.after is None:
            return
        if self._stalled & set(batch):  # progress
            self._recovered()
        if now - self._last_check < self.check_every:
            return
        self._last_check = now
        quiet = [tp for tp, heard in self._heard.items() if now - heard >= self.after]
        if not quiet:  # (after a step, its partitions are given another ``after`` first)
            return
        stuck = _unread(consumer, quiet)
        if stuck is None:  # not measurable now (the broker did not answer): no verdict
            return
        # A partition at its end at the last look whose records arrived since is not stuck: its
        # silence counts from now (else every input after a minute's idle looked like a stall).
        arrived = [tp for tp in stuck if tp in self._at_end]
        self._at_end = {tp for tp in quiet if tp not in stuck}
        for tp in arrived:
            self._heard[tp] = now
            del stuck[tp]
        cleared = {tp for tp in self._stalled if tp not in assigned or (tp in quiet and tp not in stuck)}
        if cleared:  # read to their end, or gone to another member
            self._stalled -= cleared
            if not self._stalled:
                self._recovered()
        if not stuck:
            return
        self._stalled |= set(stuck)
        for tp in stuck:  # the next step comes only after another ``after`` seconds of silence
            self._heard[tp] = now
        self._escalate(consumer, stuck)

    def _recovered(self) -> None:
        if self.steps:
            log.info("%s: the stall has cleared after %d recovery steps", self.stage, self.steps)
        self.steps = 0
        self._stalled = set()

    def _escalate(self, consumer: Consumer, stuck: Unread) -> None:
        self.steps += 1
        where = ", ".join(f"{tp.topic}-{tp.partition} at {'?' if pos is None else pos} of {end}"
                          for tp, (pos, end) in sorted(stuck.items()))
        what = f"{where} returned no record for {self.after:.0f}s"
        action = ACTIONS[min(self.steps, len(ACTIONS)) - 1]
        self._count(action)
        if action == "seek":
            log.warning("%s stalled: %s; seeking to the position to reset its fetch state", self.stage, what)
            release_parked(consumer)  # a seek alone leaves kafka-python's parked batch (core.resume)
            for tp, (pos, _end) in stuck.items():
                if pos is not None:  # (a position never found is for the re-join to cure)
                    consumer.seek(tp, pos)
        elif action == "rejoin":
            log.warning("%s stalled: %s; leaving the group and joining again", self.stage, what)
            self._rejoin()
        else:
            raise StageStalledError(f"{self.stage} stalled: {what}, through a seek and a re-join: exiting "
                                    "for a supervisor to start it again")


def _unread(consumer: Consumer, partitions: list[TopicPartition]) -> Unread | None:
    """Partition → (position, end) of those with records past their position; None if not known.

    With ``read_committed`` the end is the last stable offset and the position moves past
    transaction markers, so a partition read to its end is never counted. A position still not
    known after the wait counts as stuck (None): a fetch state that never resets is one way to stall.
    """
    try:
        ends = consumer.end_offsets(partitions, timeout_ms=5000)
        found: Unread = {}
        for tp in partitions:
            position, end = consumer.position(tp, timeout_ms=5000), ends.get(tp)
            if end is None:
                return None
            if position is None or end > position:
                found[tp] = (position, end)
    except KafkaError as exc:  # e.g. a rebalance took the partition meanwhile
        log.debug("cannot measure quiet partitions (%r)", exc)
        return None
    return found
