"""The request slots: one weighted FIFO semaphore, fixed (``--concurrency N``) or resized (``auto``)."""

import asyncio

import pytest

from eaglefeed.consumers.generate.inference._slots import Slots


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_slots_grow_and_shrink_and_serve_in_order():
    async def go():
        slots = Slots(total=2)
        order = []

        async def take(name, n):
            await slots.acquire(n)
            order.append(name)

        await slots.acquire(1)
        await slots.acquire(1)
        waiting = [asyncio.create_task(take("big", 3)), asyncio.create_task(take("one", 1))]
        await settle()
        assert order == [] and slots.held == 2
        slots.resize(6)  # room for both, the earlier first
        await settle()
        assert order == ["big", "one"] and slots.held == 6
        slots.resize(1)  # smaller: what is held stays, nothing new gets in until it is released
        late = asyncio.create_task(take("late", 1))
        await settle()
        assert order == ["big", "one"]
        slots.release(3)
        slots.release(1)
        slots.release(1)
        await settle()
        assert order == ["big", "one"] and slots.held == 1  # held 1 of total 1
        slots.release(1)
        await settle()
        assert order == ["big", "one", "late"]
        await asyncio.gather(*waiting, late)

    asyncio.run(go())


def test_a_cancelled_waiter_gives_way():
    async def go():
        slots = Slots(total=1)
        await slots.acquire(1)
        first = asyncio.create_task(slots.acquire(1))
        second = asyncio.create_task(slots.acquire(1))
        await settle()
        first.cancel()
        await settle()
        slots.release(1)
        await settle()
        assert second.done() and slots.held == 1
        with pytest.raises(asyncio.CancelledError):
            await first

    asyncio.run(go())


def test_a_request_larger_than_all_slots_runs_alone():
    async def go():
        slots = Slots(total=2)
        await asyncio.wait_for(slots.acquire(8), 1)
        assert slots.held == 8

    asyncio.run(go())


def test_a_held_context_takes_n_slots_and_gives_them_back_even_on_failure():
    async def go():
        slots = Slots(total=4)
        async with slots.hold(3):
            assert slots.held == 3
        assert slots.held == 0
        with pytest.raises(RuntimeError):
            async with slots.hold(0):  # at least one slot
                assert slots.held == 1
                raise RuntimeError("boom")
        assert slots.held == 0 and slots.total == 4
        assert Slots(total=0).total == 1

    asyncio.run(go())


def test_two_multi_slot_requests_never_deadlock_and_single_ones_never_starve_them():
    async def go():
        slots = Slots(total=4)
        order = []

        async def take(name, n):
            async with slots.hold(n):
                order.append(name)
                await asyncio.sleep(0.01)

        await slots.acquire(1)  # a request in flight
        tasks = [asyncio.create_task(take(name, n)) for name, n in
                 [("three", 3), ("four", 4), ("one", 1), ("three again", 3)]]
        await settle()
        assert order == ["three"] and slots.held == 4
        slots.release(1)
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        assert order == ["three", "four", "one", "three again"]  # first come, first served
        assert slots.held == 0

    asyncio.run(go())
