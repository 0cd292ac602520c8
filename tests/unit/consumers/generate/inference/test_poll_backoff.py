"""Auto reads a steady server's ``/metrics`` less often, and fast again when anything moves."""

import asyncio

import httpx

from eaglefeed.consumers.generate.inference import AutoConcurrency, Load, ServerPool
from eaglefeed.consumers.generate.inference._poll_backoff import FAST, SLOWEST, PollBackoff

CALM = Load(running=120, waiting=10)  # a saturated server with the small queue the limit tolerates
QUEUED = Load(running=120, waiting=100)


def test_calm_readings_lengthen_the_interval_up_to_the_cap():
    backoff = PollBackoff()
    intervals = [backoff.reading(limit=150, load=CALM) for _ in range(8)]
    # the first reading only starts the streak; three calm ones, then doubling to the cap
    assert intervals == [FAST, FAST, FAST, 2 * FAST, 4 * FAST, SLOWEST, SLOWEST, SLOWEST]


def test_the_limits_own_wiggle_around_the_capacity_stays_calm():
    backoff = PollBackoff()
    for limit in (150, 143, 157, 150, 144, 158, 151):  # cut a few per cent, grow a tenth, …
        interval = backoff.reading(limit=limit, load=CALM)
    assert interval == SLOWEST


def test_anything_that_moves_brings_back_the_fast_interval_at_once():
    def slowed() -> PollBackoff:
        backoff = PollBackoff()
        for _ in range(8):
            backoff.reading(limit=150, load=CALM)
        assert backoff.interval == SLOWEST
        return backoff

    assert slowed().reading(limit=150, load=QUEUED) == FAST  # a queue growing on the server
    assert slowed().reading(limit=90, load=CALM) == FAST  # a deep cut
    assert slowed().reading(limit=300, load=CALM) == FAST  # more capacity found
    assert slowed().reading(limit=150, load=None) == FAST  # it no longer reports its load
    assert slowed().disturbed() == FAST  # a failed read, a change of health
    drifting = slowed()  # small steps in one direction add up to a move
    assert [drifting.reading(limit=lim, load=CALM) for lim in (165, 181)] == [SLOWEST, FAST]


class FakeTime:
    """A clock that only the code under test moves, by sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class FakeServer:
    """One server's ``/metrics``: the load it reports now, and when it was read."""

    def __init__(self, fake_time: FakeTime) -> None:
        self.time = fake_time
        self.load = (10, 0)  # the limit (16) is not in use: it holds
        self.fail = False
        self.reads: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/metrics":
            return httpx.Response(404)
        self.reads.append(self.time.now)
        if self.fail:
            raise httpx.ConnectError("refused", request=request)
        running, waiting = self.load
        return httpx.Response(200, text=f"vllm:num_requests_running{{engine=\"0\"}} {running}\n"
                                        f"vllm:num_requests_waiting{{engine=\"0\"}} {waiting}\n")


async def run_until(fake_time: FakeTime, seconds: float) -> None:
    """Let the follower run until the fake clock has reached ``seconds``."""
    while fake_time.now < seconds:
        await asyncio.sleep(0)


def follow(scenario):
    """Run ``scenario(auto, server, fake server, fake time)`` against one server with a fake clock."""
    async def go():
        fake_time = FakeTime()
        fake = FakeServer(fake_time)
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
            pool = ServerPool(client=http, urls=["http://a"], eject_after=3, probe_interval=3600)
            auto = AutoConcurrency(pool=pool, http=http, report_seconds=0, clock=fake_time.clock,
                                   sleep=fake_time.sleep)
            try:
                await scenario(auto, pool.servers[0], fake, fake_time)
            finally:
                await pool.close()

    asyncio.run(go())


def gaps(reads: list[float], since: float) -> list[float]:
    later = [t for t in reads if t >= since]
    return [round(b - a, 3) for a, b in zip(later, later[1:], strict=False)]


def test_a_steady_server_is_read_a_few_times_a_minute_not_twice_a_second():
    async def scenario(auto, server, fake, fake_time):
        await run_until(fake_time, 60)
        assert server.limit == 16  # held throughout
        assert len(fake.reads) <= 22  # at FAST throughout it would be 120
        assert max(gaps(fake.reads, 0)) <= SLOWEST + 1e-6  # and never longer apart than the cap
        assert "read every 4 s" in auto.describe()

    follow(scenario)


def test_a_queue_on_a_slowed_down_server_is_seen_within_the_cap_and_followed_fast():
    async def scenario(auto, server, fake, fake_time):
        await run_until(fake_time, 30)
        assert gaps(fake.reads, 20)[-1] == SLOWEST
        server.sequences = 16
        auto.acquired(server)  # in use …
        fake.load = (16, 60)  # … and the server slowed: a queue grows
        changed = fake_time.now
        await run_until(fake_time, changed + SLOWEST + FAST)
        assert server.limit < 16  # cut within the cap of the change
        first = min(t for t in fake.reads if t >= changed)
        assert first - changed <= SLOWEST
        await run_until(fake_time, first + 3)
        assert set(gaps(fake.reads, first)) == {FAST}  # and read at the fast pace from there

    follow(scenario)


def test_a_failed_read_or_a_change_of_health_reads_again_at_the_next_tick():
    async def scenario(auto, server, fake, fake_time):
        await run_until(fake_time, 30)
        assert auto.backoffs[server.url].interval == SLOWEST
        fake.fail = True
        await run_until(fake_time, 35)
        fake.fail = False
        failed = [t for t in fake.reads if 30 <= t <= 35]
        assert gaps(failed, 0) and set(gaps(failed, 0)) == {FAST}  # refused reads retried every tick
        await run_until(fake_time, 60)
        assert auto.backoffs[server.url].interval == SLOWEST
        server.healthy = False  # out of rotation: not read at all
        before = len(fake.reads)
        await run_until(fake_time, 70)
        assert len(fake.reads) == before
        server.healthy = True  # back (perhaps restarted): read at the next tick, then fast
        back = fake_time.now
        await run_until(fake_time, back + 2)
        assert min(t for t in fake.reads if t >= back) - back <= FAST + 1e-6
        assert set(gaps(fake.reads, back)) == {FAST}

    follow(scenario)
