"""``--concurrency auto`` at run time: servers chosen under their limits, limits followed, slots sized."""

import asyncio

import httpx

from eaglefeed.consumers.generate.inference import AutoConcurrency, LimitSettings, Load, ServerPool


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_pool_sends_a_server_no_more_than_its_limit():
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=["http://a", "http://b"], eject_after=3, probe_interval=1)
            a, b = pool.servers
            a.limit, b.limit = 1, 3
            picked = [(await pool.acquire()).url for _ in range(4)]
            assert sorted(picked) == ["http://a", "http://b", "http://b", "http://b"]
            assert (a.sequences, b.sequences) == (1, 3)
            pool.release(b, failed=False)
            assert (await pool.acquire(weight=1)).url == "http://b"
            await pool.close()

    asyncio.run(go())


class FakeServers:
    """/metrics of fake servers whose running and waiting counts a test sets."""

    def __init__(self, loads):
        self.loads = loads
        self.reads = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        load = self.loads.get(request.url.host)
        if load is None:
            return httpx.Response(404)
        self.reads += 1
        running, waiting = load
        return httpx.Response(200, text=f"sglang:num_running_reqs{{tp_rank=\"0\"}} {running}\n"
                                        f"sglang:num_queue_reqs{{tp_rank=\"0\"}} {waiting}\n")


async def until(condition, *, polls=2000):
    for _ in range(polls):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def test_limits_follow_each_servers_load_and_size_the_slots():
    async def go():
        fake = FakeServers({"a": (16, 0), "b": (16, 40)})
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
            pool = ServerPool(client=http, urls=["http://a", "http://b", "http://c"], eject_after=3,
                              probe_interval=60)
            auto = AutoConcurrency(pool=pool, http=http, poll_interval=0.001, report_seconds=0)
            a, b, c = pool.servers
            assert auto.slots.total == 3 * LimitSettings.start
            for server in (a, b):
                server.sequences = server.limit or 0  # each full to its limit
                auto.acquired(server)
            await until(lambda: a.limit == 2 * LimitSettings.start and (b.limit or 0) < LimitSettings.start)
            assert c.limit == LimitSettings.start  # no load reports (404): latency decides, none yet
            assert auto.slots.total == (a.limit or 0) + (b.limit or 0) + (c.limit or 0)
            a.healthy = False  # out of rotation: not counted, and started again
            await until(lambda: auto.slots.total == (b.limit or 0) + (c.limit or 0))
            a.healthy = True
            await until(lambda: a.limit == LimitSettings.start
                        and auto.slots.total == sum(s.limit or 0 for s in pool.servers))
            assert "http://c 16 (latency only)" in auto.describe()
            await pool.close()

    asyncio.run(go())


def test_the_fetch_window_follows_the_sum_of_the_limits():
    from eaglefeed.consumers.generate.inference import InferenceClient

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(404))) as http:
            pool = ServerPool(client=http, urls=["http://a", "http://b"], eject_after=3, probe_interval=60)
            auto = AutoConcurrency(pool=pool, http=http, poll_interval=60, report_seconds=0)
            client = InferenceClient(pool=pool, http=http, concurrency=auto, max_attempts=1, backoff=0,
                                     backoff_max=0)
            assert client.window == 2 * 2 * LimitSettings.start
            auto.limits["http://a"].reset()
            pool.servers[0].sequences = LimitSettings.start
            auto.acquired(pool.servers[0])
            auto.limits["http://a"].on_load(Load(running=16, waiting=0))  # doubles
            auto._apply(pool.servers[0])
            assert client.window == 2 * (2 * LimitSettings.start + LimitSettings.start)
            fixed = InferenceClient(pool=pool, http=http, concurrency=100, max_attempts=1, backoff=0,
                                    backoff_max=0)
            assert fixed.window == 200
            await pool.close()

    asyncio.run(go())


def test_a_conversation_queues_briefly_on_its_own_server_rather_than_lose_its_cache():
    from eaglefeed.consumers.generate.inference.affinity import home_server
    from eaglefeed.consumers.generate.inference.limits import tolerated

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=["http://a", "http://b"], eject_after=3, probe_interval=60,
                              affinity_load=1.25)
            home = home_server("conv-1", pool.servers)
            other = next(s for s in pool.servers if s is not home)
            for server in pool.servers:
                server.limit = server.sequences = server.outstanding = 20  # both at their limit
            other.sequences = other.outstanding = 19  # one slot free elsewhere
            picked = [await pool.acquire("conv-1") for _ in range(int(tolerated(20)) - 20)]
            assert all(s is home for s in picked)  # within what its limit tolerates
            assert await pool.acquire("conv-1") is other  # beyond it: where the room is
            await pool.close()

    asyncio.run(go())
