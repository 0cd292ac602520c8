"""The continuous-batching latency model, stepped by hand with a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from eaglefeed.devtools.standin.output import Completion
from eaglefeed.devtools.standin.scheduler import (
    BatchingScheduler,
    ImmediateScheduler,
    QueueFullError,
    Sequence,
    StepCosts,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def seq(rid: str, tokens: int, prompt: int = 10, cached: int = 0) -> Sequence:
    completion = Completion(list(range(tokens)), {"type": "stop", "matched": tokens - 1})
    return Sequence(rid=rid, prompt_len=prompt, cached_tokens=cached, completion=completion, arrival=0.0)


ZERO = StepCosts(prefill_ms_per_token=0, decode_step_ms=0, decode_step_ms_per_running=0)


def test_step_seconds_formula():
    costs = StepCosts(prefill_ms_per_token=0.5, decode_step_ms=10, decode_step_ms_per_running=0.25)
    assert costs.step_seconds(prefill_tokens=100, decoding=8) == pytest.approx((50 + 10 + 2) / 1000)
    assert costs.step_seconds(prefill_tokens=0, decoding=0) == 0
    assert costs.step_seconds(prefill_tokens=4, decoding=0) == pytest.approx(0.002)


def test_every_step_advances_every_running_sequence_by_one_token():
    async def scenario():
        clock = FakeClock()
        sched = BatchingScheduler(max_running=2, max_queued=None, costs=ZERO, clock=clock)
        a, b, c = seq("a", 3), seq("b", 1), seq("c", 2)
        sched.submit([a, b, c])
        await sched.step()  # admits a, b (prefill gives their first token); c waits
        assert (a.emitted, b.emitted, c.emitted) == (1, 1, 0)
        assert b.finished and not a.finished and sched.num_waiting == 1
        await sched.step()  # c admitted, a decodes
        assert (a.emitted, c.emitted) == (2, 1)
        await sched.step()
        assert a.finished and c.finished
        assert a.finish_reason == {"type": "stop", "matched": 2}
        assert sched.num_running == 0

    asyncio.run(scenario())


def test_occupancy_integral_is_running_count_times_time():
    async def scenario():
        clock = FakeClock()
        sched = BatchingScheduler(max_running=4, max_queued=None, costs=ZERO, clock=clock)
        sched.submit([seq("a", 10), seq("b", 10)])
        await sched.step()
        clock.now += 2.0
        assert sched.running_request_seconds() == pytest.approx(4.0)
        sched.abort(lambda s: s.rid == "a", "stop")
        clock.now += 1.0
        assert sched.running_request_seconds() == pytest.approx(5.0)

    asyncio.run(scenario())


def test_queue_bound_counts_free_slots():
    async def scenario():
        sched = BatchingScheduler(max_running=2, max_queued=1, costs=ZERO, clock=FakeClock())
        sched.submit([seq("a", 5), seq("b", 5), seq("c", 5)])  # two fit in slots, one queues
        with pytest.raises(QueueFullError):
            sched.submit([seq("d", 5)])
        sched.submit([seq("h", 1)], force=True)
        assert sched.num_waiting == 4

    asyncio.run(scenario())


def test_abort_keeps_partial_output():
    async def scenario():
        sched = BatchingScheduler(max_running=1, max_queued=None, costs=ZERO, clock=FakeClock())
        running, waiting = seq("a", 10), seq("b", 10)
        sched.submit([running, waiting])
        await sched.step()
        await sched.step()
        assert sched.abort(lambda s: True, "bye") == 2
        assert running.output_ids == [0, 1]
        assert running.finish_reason == {"type": "abort", "message": "bye"}
        assert waiting.output_ids == [] and waiting.finish_reason["type"] == "abort"

    asyncio.run(scenario())


def test_step_sleeps_prefill_plus_decode_time():
    async def scenario():
        costs = StepCosts(prefill_ms_per_token=1.0, decode_step_ms=20.0, decode_step_ms_per_running=0)
        sched = BatchingScheduler(max_running=4, max_queued=None, costs=costs)
        sched.submit([seq("a", 5, prompt=30, cached=10)])
        loop = asyncio.get_running_loop()
        start = loop.time()
        await sched.step()  # prefill of 20 uncached tokens
        prefill = loop.time() - start
        await sched.step()  # one decode step
        decode = loop.time() - start - prefill
        assert 0.019 <= prefill < 0.2 and 0.019 <= decode < 0.2

    asyncio.run(scenario())


def test_start_stop_runs_to_completion_and_aborts_leftovers():
    async def scenario():
        costs = StepCosts(prefill_ms_per_token=0, decode_step_ms=1.0, decode_step_ms_per_running=0)
        sched = BatchingScheduler(max_running=2, max_queued=None, costs=costs)
        sched.start()
        quick, slow = seq("q", 3), seq("s", 100000)
        quick.notify = asyncio.Event()
        sched.submit([quick, slow])
        while not quick.finished:
            await quick.notify.wait()
            quick.notify.clear()
        await sched.stop()
        assert slow.finish_reason["type"] == "abort" and 0 < slow.emitted < 100000

    asyncio.run(scenario())


def test_immediate_scheduler_finishes_on_submit():
    sched = ImmediateScheduler(max_running=8)
    a = seq("a", 4)
    sched.submit([a])
    assert a.finished and a.emitted == 4 and sched.num_running == 0
    assert sched.running_request_seconds() == 0.0
