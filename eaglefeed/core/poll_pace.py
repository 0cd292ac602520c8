"""Keep kafka-python 3.0.12's ``poll`` from spinning while a group heartbeat goes unanswered (issue 26).

``KafkaConsumer._poll_once`` caps each wait for fetched records at the coordinator's
``time_to_next_poll()``, which (auto-commit off, as in every eaglefeed consumer) is the time to
the next heartbeat, counted from when the last one was *sent*. In 3.0.12 heartbeats are sent by a
loop on the client's own IO thread, which awaits each reply; once a reply is more than the
heartbeat interval (2 s) late (a broker node SIGSTOPped, or the group coordinator's node busy
moving leaders after another node died), the next heartbeat is "due" and the cap is 0.
``poll(timeout_ms=200)`` then calls ``_poll_once`` back to back until its 200 ms are over, for as
long as the reply is missing (up to ``request_timeout_ms``, 30 s, less those 2 s); with nothing in
flight it skips its idle sleep as well. Every call with a fetch in flight also leaves a wake-up
callback on it that holds a ``KafkaTimeoutError`` and its traceback (through
``manager.wait_for``'s wrapper future), kept until that fetch ends and then until the cyclic GC runs.
Measured on a real broker SIGSTOPped for 10 s (``tests/integration/test_poll_pace.py``): the
polling thread used 2.2 s of CPU and left 23,400 such errors alive; with :func:`pace_polls`,
0.02 s and 112. In the nemesis this was the step in RSS that converse, the workers and the sinks
showed at node faults: the objects went, but Python's allocator kept the memory they had needed.

The user thread has nothing to do for the heartbeat (the IO thread sends it), so
:func:`pace_polls` gives ``time_to_next_poll`` a floor of ``retry_backoff_ms``: a due heartbeat
still cuts a wait short, to within a tenth of a second, but no longer to nothing. A consumer
without these internals (the unit tests' fake, a kafka-python that renamed them) is left as it is;
on one that fixed the cap the floor is harmless, and ``test_without_the_floor_kafka_python_spins``
says when it can go. Upstream: the cap in ``KafkaConsumer._poll_once`` and the callbacks left on
pending futures in ``Fetcher.fetch_records``.
"""

from __future__ import annotations

from typing import Any, TypeVar

C = TypeVar("C")


def pace_polls(consumer: C) -> C:
    """Give ``consumer``'s coordinator a floor on ``time_to_next_poll`` (see the module); return it."""
    coordinator: Any = getattr(consumer, "_coordinator", None)
    next_poll = getattr(coordinator, "time_to_next_poll", None)
    if not callable(next_poll) or getattr(next_poll, "paced", False):
        return consumer
    floor = float(getattr(consumer, "config", {}).get("retry_backoff_ms", 100)) / 1000

    def paced() -> float:
        return max(float(next_poll()), floor)

    paced.paced = True  # type: ignore[attr-defined]
    coordinator.time_to_next_poll = paced
    return consumer
