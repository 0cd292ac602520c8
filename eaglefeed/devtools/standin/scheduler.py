"""Continuous-batching latency model: one asyncio task steps every running sequence at once.

Each step admits waiting sequences into free slots (FIFO), then sleeps for

    prefill_ms_per_token * (uncached prompt tokens of the newly admitted)
    + decode_step_ms + decode_step_ms_per_running * (sequences already decoding)

after which every newly admitted sequence has its first token and every decoding sequence one
more. A sequence leaves its slot as soon as its planned output is fully emitted. ``none`` mode
(``ImmediateScheduler``) finishes sequences on submit.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.devtools.standin.output import Completion


class QueueFullError(Exception):
    """Admitting the sequences would exceed ``--max-queued-requests``."""


@dataclass(eq=False, slots=True, kw_only=True)
class Sequence:
    """One request item inside the engine (one prompt sample).

    Attributes:
        rid: the request id reported as ``meta_info.id``.
        parent_rid: the rid the client sent when ``rid`` was regenerated for ``n > 1``.
        prompt_len: number of prompt tokens.
        cached_tokens: prompt tokens served by the prefix cache.
        completion: the planned output.
        arrival: monotonic time of arrival.
        notify: set whenever this sequence makes progress (shared by a request's sequences).
        emitted: output tokens emitted so far.
        finish_reason: set once the sequence is finished.
        admitted_at: monotonic time it got a slot.
        first_token_at: monotonic time of its first output token.
        finished_at: monotonic time it finished.
    """

    rid: str
    parent_rid: str | None = None
    prompt_len: int
    cached_tokens: int = 0
    completion: Completion
    arrival: float
    notify: asyncio.Event | None = None
    emitted: int = 0
    finish_reason: dict[str, Any] | None = None
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        """True once a finish reason is set."""
        return self.finish_reason is not None

    @property
    def output_ids(self) -> list[int]:
        """The ids emitted so far."""
        ids = self.completion.output_ids
        return ids if self.emitted == len(ids) else ids[: self.emitted]

    def finish(self, now: float, reason: dict[str, Any] | None = None) -> None:
        """Mark finished with the planned reason, or ``reason`` (aborts keep partial output)."""
        self.finish_reason = reason or self.completion.finish_reason
        self.finished_at = now
        if self.first_token_at is None and self.emitted:
            self.first_token_at = now
        if self.notify is not None:
            self.notify.set()


@dataclass(kw_only=True)
class StepCosts:
    """Latency knobs of the batching model (milliseconds)."""

    prefill_ms_per_token: float = 0.02
    decode_step_ms: float = 10.0
    decode_step_ms_per_running: float = 0.1

    def step_seconds(self, *, prefill_tokens: int, decoding: int) -> float:
        """Return the duration of one engine step."""
        ms = self.prefill_ms_per_token * prefill_tokens
        if decoding:
            ms += self.decode_step_ms + self.decode_step_ms_per_running * decoding
        return ms / 1000.0


@dataclass(kw_only=True)
class _Occupancy:
    """Integral over time of the number of occupied slots."""

    clock: Callable[[], float]
    seconds: float = 0.0
    last: float = field(default=0.0)

    def advance(self, running: int) -> None:
        now = self.clock()
        self.seconds += running * (now - self.last)
        self.last = now


class BatchingScheduler:
    """Slots, a FIFO waiting queue and the stepping task."""

    def __init__(
        self,
        *,
        max_running: int,
        max_queued: int | None,
        costs: StepCosts,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create an idle scheduler; call ``start()`` inside the event loop.

        Args:
            max_running: number of slots.
            max_queued: waiting-queue bound (None: unbounded).
            costs: step latency knobs.
            clock: monotonic clock (seconds).
        """
        self.max_running = max_running
        self._max_queued = max_queued
        self._costs = costs
        self._clock = clock
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._occupancy = _Occupancy(clock=clock, last=clock())
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def num_running(self) -> int:
        """Sequences holding a slot."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences waiting for a slot."""
        return len(self._waiting)

    def used_tokens(self) -> int:
        """Tokens held by running sequences (prompt + emitted output)."""
        return sum(seq.prompt_len + seq.emitted for seq in self._running)

    def running_request_seconds(self) -> float:
        """Integral over time of the running count, up to now."""
        self._occupancy.advance(len(self._running))
        return self._occupancy.seconds

    def submit(self, seqs: list[Sequence], *, force: bool = False) -> None:
        """Queue sequences (all or none).

        Args:
            seqs: the sequences of one request.
            force: skip the queue bound (health checks).

        Raises:
            QueueFullError: when the waiting queue would exceed its bound.
        """
        if not force and self._max_queued is not None:
            free = self.max_running - len(self._running)
            if len(self._waiting) + len(seqs) - free > self._max_queued:
                raise QueueFullError("The request queue is full.")
        self._waiting.extend(seqs)
        self._wake.set()

    def abort(self, match: Callable[[Sequence], bool], message: str) -> int:
        """Finish every matching sequence with an abort; return how many were aborted."""
        now = self._clock()
        self._occupancy.advance(len(self._running))
        aborted = [seq for seq in self._waiting if match(seq)]
        for seq in aborted:
            self._waiting.remove(seq)
            seq.finish(now, {"type": "abort", "message": "Abort in waiting queue"})
        running = [seq for seq in self._running if match(seq)]
        for seq in running:
            self._running.remove(seq)
            seq.finish(now, {"type": "abort", "message": message})
        return len(aborted) + len(running)

    def start(self) -> None:
        """Start the stepping task."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="standin-scheduler")

    async def stop(self) -> None:
        """Stop stepping and abort whatever is left."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.abort(lambda seq: True, "The server is shutting down.")

    async def _loop(self) -> None:
        while True:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
            await self.step()

    async def step(self) -> None:
        """Run one engine step: admit, sleep the step time, advance every running sequence."""
        self._occupancy.advance(len(self._running))
        now = self._clock()
        admitted = []
        while self._waiting and len(self._running) < self.max_running:
            seq = self._waiting.popleft()
            seq.admitted_at = now
            self._running.append(seq)
            admitted.append(seq)
        decoding = len(self._running) - len(admitted)
        prefill_tokens = sum(seq.prompt_len - seq.cached_tokens for seq in admitted)
        await asyncio.sleep(self._costs.step_seconds(prefill_tokens=prefill_tokens, decoding=decoding))
        self._occupancy.advance(len(self._running))
        self._advance(self._clock())

    def _advance(self, now: float) -> None:
        still_running = []
        for seq in self._running:
            if seq.finished:
                continue
            if seq.emitted < len(seq.completion.output_ids):
                seq.emitted += 1
                if seq.first_token_at is None:
                    seq.first_token_at = now
            if seq.emitted >= len(seq.completion.output_ids):
                seq.finish(now)
            else:
                still_running.append(seq)
                if seq.notify is not None:
                    seq.notify.set()
        self._running = still_running


class ImmediateScheduler:
    """``--latency-model none``: every sequence is finished the moment it is submitted."""

    max_running: int
    num_running = 0
    num_waiting = 0

    def __init__(self, *, max_running: int, clock: Callable[[], float] = time.monotonic) -> None:
        """Create the scheduler.

        Args:
            max_running: reported slot count (for metrics).
            clock: monotonic clock (seconds).
        """
        self.max_running = max_running
        self._clock = clock

    def used_tokens(self) -> int:
        """Always 0: nothing holds a slot."""
        return 0

    def running_request_seconds(self) -> float:
        """Always 0: nothing holds a slot."""
        return 0.0

    def submit(self, seqs: list[Sequence], *, force: bool = False) -> None:
        """Finish the sequences at once (``force`` is accepted for interface parity)."""
        now = self._clock()
        for seq in seqs:
            seq.admitted_at = seq.first_token_at = now
            seq.emitted = len(seq.completion.output_ids)
            seq.finish(now)

    def abort(self, match: Callable[[Sequence], bool], message: str) -> int:
        """Nothing is ever in flight here; return 0."""
        return 0

    def start(self) -> None:
        """Nothing to start."""

    async def stop(self) -> None:
        """Nothing to stop."""


Scheduler = BatchingScheduler | ImmediateScheduler
