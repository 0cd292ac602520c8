"""The floor on kafka-python's poll cap (``eaglefeed.core.poll_pace``); the real broker's case is in
tests/integration/test_poll_pace.py."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.core.poll_pace import pace_polls


class Coordinator:
    def __init__(self, due_in: float) -> None:
        self.due_in = due_in

    def time_to_next_poll(self) -> float:
        return self.due_in


def consumer(due_in: float, retry_backoff_ms: int = 100) -> SimpleNamespace:
    return SimpleNamespace(_coordinator=Coordinator(due_in), config={"retry_backoff_ms": retry_backoff_ms})


@given(st.floats(min_value=0, max_value=60), st.integers(min_value=1, max_value=1000))
def test_the_cap_is_never_under_the_retry_backoff_and_a_later_one_is_kept(due_in, backoff_ms):
    paced = consumer(due_in, backoff_ms)
    pace_polls(paced)
    assert paced._coordinator.time_to_next_poll() == max(due_in, backoff_ms / 1000)


def test_a_heartbeat_due_now_waits_a_tenth_of_a_second_and_the_cap_follows_the_coordinator():
    paced = consumer(0.0)
    pace_polls(paced)
    assert paced._coordinator.time_to_next_poll() == 0.1
    paced._coordinator.due_in = 1.5  # a heartbeat answered: the next one is 1.5 s away
    assert paced._coordinator.time_to_next_poll() == 1.5


def test_pacing_twice_wraps_once():
    paced = consumer(0.0)
    pace_polls(paced)
    first = paced._coordinator.time_to_next_poll
    pace_polls(paced)
    assert paced._coordinator.time_to_next_poll is first


def test_a_consumer_without_the_internals_is_left_alone():
    fake = SimpleNamespace(poll=lambda **_: {})
    pace_polls(fake)
    assert vars(fake).keys() == {"poll"}
    no_cap = SimpleNamespace(_coordinator=SimpleNamespace())
    pace_polls(no_cap)
    assert not vars(no_cap._coordinator)
