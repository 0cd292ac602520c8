"""The one thread that runs the worker's blocking calls: order, errors, cancellation, shutdown."""

import asyncio
import threading
import time

import pytest

from eaglefeed.consumers.generate.one_thread import OneThread


def test_calls_run_in_order_on_one_named_daemon_thread_and_errors_reach_the_caller():
    async def go():
        runner = OneThread("test-one")
        seen = []

        def note(value, *, delay=0.0):
            time.sleep(delay)
            seen.append((value, threading.current_thread()))
            return value * 2

        results = await asyncio.gather(runner(note, 1, delay=0.02), runner(note, 2), runner(note, 3))
        with pytest.raises(ZeroDivisionError):
            await runner(lambda: 1 / 0)
        runner.shutdown(wait=True)
        return results, seen

    results, seen = asyncio.run(go())
    assert results == [2, 4, 6] and [value for value, _ in seen] == [1, 2, 3]
    threads = {thread for _, thread in seen}
    assert len(threads) == 1
    (thread,) = threads
    assert thread.name == "test-one" and thread.daemon and not thread.is_alive()


def test_a_call_cancelled_before_it_started_never_runs():
    async def go():
        runner = OneThread("test-cancel")
        release = threading.Event()
        ran = []
        first = asyncio.create_task(runner(release.wait, 2))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(runner(ran.append, "second"))
        await asyncio.sleep(0.01)
        second.cancel()
        await asyncio.sleep(0.01)  # the cancellation reaches the queued call on the loop's next turn
        release.set()
        assert await first is True
        await runner(ran.append, "third")
        runner.shutdown(wait=True)
        return ran, second

    ran, second = asyncio.run(go())
    assert ran == ["third"] and second.cancelled()


def test_shutdown_waits_for_queued_calls_or_leaves_a_stuck_one_behind():
    async def go():
        done = []
        runner = OneThread("test-wait")
        pending = asyncio.ensure_future(runner(lambda: (time.sleep(0.05), done.append(1))))
        await asyncio.sleep(0.01)
        runner.shutdown(wait=True)
        assert done == [1]
        await pending
        stuck = OneThread("test-stuck")
        never = threading.Event()
        call = asyncio.ensure_future(stuck(never.wait))
        await asyncio.sleep(0.01)
        started = time.monotonic()
        stuck.shutdown(wait=False)  # returns at once; the daemon cannot keep the process alive
        assert time.monotonic() - started < 0.5
        never.set()
        await call

    asyncio.run(go())
