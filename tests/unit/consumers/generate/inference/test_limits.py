"""A server's in-flight limit (``--concurrency auto``) keeps a fake server full without a growing queue."""

from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.consumers.generate.inference import LimitSettings, Load
from eaglefeed.consumers.generate.inference.limits import ALLOWANCE_MIN, ServerLimit

S = LimitSettings()


def poll(limits: list[ServerLimit], capacity: int) -> Load:
    """One load reading of a fake server with ``capacity`` slots, each worker sending up to its limit."""
    sent = 0
    for limit in limits:
        limit.note_in_flight(limit.limit)  # a backlog: every worker fills its limit
        sent += limit.limit
    load = Load(running=min(sent, capacity), waiting=max(0, sent - capacity))
    for limit in limits:
        limit.on_load(load)
    return load


def upper(capacity: int) -> float:
    """The most a settled limit may reach: the allowance above capacity, plus one growth step."""
    return (capacity + S.allowance * capacity + ALLOWANCE_MIN) * (1 + S.growth) + 1


def test_slow_start_doubles_while_the_server_has_room():
    limit = ServerLimit()
    seen = []
    for _ in range(4):
        poll([limit], capacity=10_000)
        seen.append(limit.limit)
    assert seen == [32, 64, 128, 256]


def test_a_limit_not_in_use_does_not_grow():
    limit = ServerLimit()
    for _ in range(10):
        limit.note_in_flight(3)  # the worker has little work: the limit is not what holds it back
        limit.on_load(Load(running=3, waiting=0))
    assert limit.limit == S.start


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(min_value=S.minimum, max_value=S.maximum))
def test_one_worker_settles_at_the_server_capacity(capacity):
    limit = ServerLimit()
    for _ in range(40):
        poll([limit], capacity)
    for _ in range(30):
        load = poll([limit], capacity)
        assert capacity <= limit.limit <= max(upper(capacity), S.minimum)
        assert load.running == capacity  # kept full ...
        assert load.waiting <= upper(capacity) - capacity  # ... with a short queue


@settings(max_examples=100, deadline=None)
@given(capacity=st.integers(min_value=64, max_value=S.maximum), workers=st.integers(min_value=2, max_value=4))
def test_workers_sharing_a_server_fill_it_together(capacity, workers):
    limits = [ServerLimit() for _ in range(workers)]
    for _ in range(60):
        poll(limits, capacity)
    for _ in range(20):
        load = poll(limits, capacity)
        total = sum(limit.limit for limit in limits)
        assert load.running == capacity
        assert total <= 1.5 * capacity + workers * (ALLOWANCE_MIN + 2)
        assert all(limit.limit >= S.minimum for limit in limits)


def test_a_draining_queue_is_not_cut_twice():
    limit = ServerLimit()
    for _ in range(3):
        poll([limit], capacity=10_000)  # 128
    limit.note_in_flight(128)
    limit.on_load(Load(running=64, waiting=64))
    cut = limit.limit
    assert cut < 128
    limit.on_load(Load(running=64, waiting=30))  # the queue the cut answered is still draining
    assert limit.limit == cut
    limit.on_load(Load(running=64, waiting=40))  # it grows again: cut again
    assert limit.limit < cut


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000),
                          st.floats(1e-4, 10.0)), max_size=60))
def test_the_limit_stays_within_its_bounds(events):
    limit = ServerLimit()
    for in_flight, running, waiting, latency in events:
        limit.note_in_flight(in_flight)
        if in_flight % 2:
            limit.on_load(Load(running=running, waiting=waiting))
        else:
            limit.on_latency(latency)
        assert S.minimum <= limit.limit <= S.maximum


def test_reset_starts_again_in_slow_start():
    limit = ServerLimit()
    for _ in range(20):
        poll([limit], capacity=100)
    limit.reset()
    assert limit.limit == S.start
    poll([limit], capacity=10_000)
    assert limit.limit == 2 * S.start


def test_a_server_that_slows_is_followed_down():
    limit = ServerLimit()
    for _ in range(30):
        poll([limit], capacity=512)
    for _ in range(10):
        poll([limit], capacity=64)  # fewer slots now (a smaller KV cache after a restart, a slow GPU)
    assert 64 <= limit.limit <= upper(64)


def latency_window(limit: ServerLimit, capacity: int, base: float = 0.01) -> None:
    """A window of latencies per token from a fake server without load reports: queueing above capacity."""
    per_token = base * max(1.0, limit.limit / capacity)
    for _ in range(max(S.window, limit.limit // 4)):
        limit.note_in_flight(limit.limit)
        limit.on_latency(per_token)


@settings(max_examples=100, deadline=None)
@given(capacity=st.integers(min_value=S.start, max_value=S.maximum // 2))
def test_without_load_reports_latency_keeps_the_queue_short(capacity):
    limit = ServerLimit()
    for _ in range(60):
        latency_window(limit, capacity)
    for _ in range(20):
        latency_window(limit, capacity)
        assert capacity / 2 <= limit.limit <= S.tolerance * capacity * (1 + S.growth) * 1.1 + 2


def test_with_load_reports_latency_does_not_cut():
    limit = ServerLimit()
    poll([limit], capacity=10_000)
    before = limit.limit
    for _ in range(200):
        limit.on_latency(1.0)  # a bigger batch makes every step slower: not a reason to cut
    assert limit.limit == before


def test_without_load_reports_a_server_that_slows_for_good_is_learnt_again():
    limit = ServerLimit()
    for _ in range(60):
        latency_window(limit, 64)
    settled = limit.limit
    for _ in range(60):
        latency_window(limit, 64, base=0.05)  # every token five times slower, at any concurrency
    assert limit.limit >= min(settled, 64) / 2
