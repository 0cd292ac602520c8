"""``--hidden-states-budget``: fetch no prompts while the states stored and not yet consumed reach the budget.

The worker measures the store (``eaglefeed.dataset.streaming.usage``: the files present, less
those every subscribed trainer group consumed) in a thread, at most every ``interval`` seconds
(ten times as long as a measurement took, at least 0.25 s). Over the budget, the loop's room is
0: every partition is paused while the loop keeps polling (the member stays in its group) and
nothing is dropped or failed; under it, the room opens again.

With the dataset in an object store (``store``), the meter lists the store's ``hidden_states/``
and reads the trainers' records there, and the budget file is a store object; a listing costs a
request per thousand files, so it is taken at most every :data:`REMOTE_MIN_INTERVAL` seconds. A
store that cannot be reached keeps the last measurement (paused stays paused) and says so once.

The bound: once a measurement finds the store under the budget, the worker may start only as
many prompts as its window has free at that moment until the next measurement. What it has in
flight then plus what it starts is at most one window, so the store never exceeds the budget by
more than one window of prompts' states (per worker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from eaglefeed.core.capture import CaptureSettings
from eaglefeed.dataset.store import ObjectStore, StoreError, parse
from eaglefeed.dataset.streaming.budget import HEARTBEAT_SECONDS, WorkerBudget, write_budget
from eaglefeed.dataset.streaming.usage import StatesMeter, StatesUsage, human_bytes

log = logging.getLogger(__name__)

MIN_INTERVAL = 0.25
REMOTE_MIN_INTERVAL = 2.0
"""An object store is listed at most this often (each listing is requests, billed)."""
QUIET_SECONDS = 60.0
"""At the budget a worker pauses and resumes as often as trainers commit: one pair of lines this often."""


class StatesBudget:
    """The room the budget leaves the loop, from the last measurement of the store.

    Args:
        root: the dataset directory (the parent of ``--hidden-states-dir``); None with ``store``.
        budget: bytes stored and not consumed at which the worker stops fetching.
        worker_id: names the worker's file for ``status`` (``eaglefeed.dataset.streaming.budget``).
        store: the dataset's object store, when its home is one (the states are measured there).
    """

    def __init__(self, *, root: Path | None, budget: int, worker_id: str,
                 store: ObjectStore | None = None) -> None:
        self.root = None if root is None else Path(root)
        self.store = store
        self.budget = budget
        self.worker_id = worker_id
        self.meter = StatesMeter(self.root, store=store)
        self.min_interval = MIN_INTERVAL if store is None else REMOTE_MIN_INTERVAL
        self.paused = False
        self.usage = StatesUsage()
        self.max_unconsumed = 0  # the most seen (for the run's summary)
        self._allowance = 0
        self._measured = float("-inf")
        self._interval = self.min_interval
        self._unreachable = False  # the store's last measurement failed (said once until it works)
        self._told = float("-inf")
        self._said = float("-inf")  # when a pause or resume line was last logged
        self._unsaid = 0  # pauses since then, not logged

    async def room(self, room: int) -> int:
        """``room`` (records the window has free), as far as the budget allows."""
        now = time.monotonic()
        if now - self._measured >= self._interval:
            usage = await self._measure()
            self._measured = time.monotonic()
            if usage is not None:  # None: the store did not answer; the last measurement stands
                self._interval = max(self.min_interval, 10 * (self._measured - now))
                self._observe(usage)
            self._allowance = 0 if self.paused else room  # one window between measurements
        return max(0, min(room, self._allowance))

    async def _measure(self) -> StatesUsage | None:
        """A measurement of the store; None when it cannot be reached (said once until it answers)."""
        try:
            usage = await asyncio.to_thread(self.meter.measure)
        except StoreError as exc:
            if not self._unreachable:
                log.warning("hidden states: cannot measure the store for --hidden-states-budget (%s); "
                            "keeping the last measurement until it answers", exc)
            self._unreachable = True
            return None
        if self._unreachable:
            log.info("hidden states: the store answers again; measuring it for --hidden-states-budget")
            self._unreachable = False
        return usage

    def took(self, records: int) -> None:
        """Note prompts fetched since the last measurement."""
        self._allowance -= records

    def _observe(self, usage: StatesUsage) -> None:
        self.usage = usage
        self.max_unconsumed = max(self.max_unconsumed, usage.unconsumed_bytes)
        full = usage.unconsumed_bytes >= self.budget
        if full != self.paused:
            self.paused = full
            self._say(usage)
            self._tell()
        elif self.paused and self._unsaid and time.monotonic() - self._said >= QUIET_SECONDS:
            self._say(usage)  # a pause that lasts is said, with the ones not said before it
        if time.monotonic() - self._told >= HEARTBEAT_SECONDS:
            self._tell()

    def _say(self, usage: StatesUsage) -> None:
        """One line per pause and per resume; at most a pair per :data:`QUIET_SECONDS` while they repeat."""
        now = time.monotonic()
        if self.paused and now - self._said < QUIET_SECONDS:
            self._unsaid += 1
            return
        if not self.paused and self._unsaid:
            return  # the pause it ends was not said either
        self._said = now
        groups = ", ".join(usage.groups) or "none subscribed"
        more = f"; {self._unsaid} short pauses since the last line" if self._unsaid else ""
        self._unsaid = 0
        if self.paused:
            log.info("hidden states: %s stored and not consumed reached --hidden-states-budget %s: fetching "
                     "no prompts until trainers consume (trainer groups: %s%s)",
                     human_bytes(usage.unconsumed_bytes), human_bytes(self.budget), groups, more)
        else:
            log.info("hidden states: %s stored and not consumed, under --hidden-states-budget %s: fetching "
                     "prompts again (trainer groups: %s)", human_bytes(usage.unconsumed_bytes),
                     human_bytes(self.budget), groups)

    def _tell(self) -> None:
        self._told = time.monotonic()
        try:
            write_budget(self.root, WorkerBudget(worker_id=self.worker_id, budget_bytes=self.budget,
                                                 paused=self.paused, at=time.time()), store=self.store)
        except (OSError, StoreError) as exc:  # status only: the budget works without it
            log.warning("cannot write the budget file for status under %s (%r)",
                        self.root if self.store is None else self.store.uri, exc)


def states_budget(capture: CaptureSettings | None, *, worker_id: str) -> StatesBudget | None:
    """The budget of ``--hidden-states-budget`` (None without one): on the dataset's folder or its store."""
    if capture is None or capture.budget_bytes is None:
        return None
    if capture.upload:  # the states' home is the object store; the local folder is only a spool
        return StatesBudget(root=None, budget=capture.budget_bytes, worker_id=worker_id,
                            store=ObjectStore(parse(capture.upload)))
    return StatesBudget(root=capture.store.parent, budget=capture.budget_bytes, worker_id=worker_id)
