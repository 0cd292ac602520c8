"""Keep kafka-python 3.0.12's ``poll`` from spinning while a group heartbeat goes unanswered (issue 26).

``KafkaConsumer._poll_once`` caps each wait for fetched records at the coordinator's
``time_to_next_poll()``, which (auto-commit off, as in every eaglefeed consumer) is the time to
the next heartbeat: the heartbeat interval after the last one was *sent*. In 3.0.12 heartbeats are
sent by a loop on the client's own IO thread, which awaits each reply; while a reply does not come
(a broker node SIGSTOPped, or the group coordinator's node busy moving leaders after another node
died), the next heartbeat is "due" and the cap is 0. ``poll(timeout_ms=200)`` then calls
``_poll_once`` back to back until its 200 ms are over, for as long as the reply is missing (up to
``request_timeout_ms``, 30 s): a full core. Every call also hangs a wake-up callback, with a
``KafkaTimeoutError`` and its traceback, on each fetch still in flight, freed only when that fetch
ends and the cyclic GC runs. Measured on a real broker SIGSTOPped for 12 s
(``tests/integration/test_poll_pace.py``): 5.3 s of CPU in 6 s, 28,600 such errors and 1.4 million
objects alive; after this module, 0.04 s and 152. In the nemesis this was the step in RSS that
converse and the workers showed at node faults: the objects went, but Python's allocator kept the
memory they had needed.

The user thread has nothing to do for the heartbeat (the IO thread sends it), so
:func:`pace_polls` gives ``time_to_next_poll`` a floor of ``retry_backoff_ms``: a due heartbeat
still cuts a wait short, to within a tenth of a second, but no longer to nothing. A consumer without
these internals (a fake, another kafka-python) is left as it is. Upstream: the cap in
``KafkaConsumer._poll_once`` and the callbacks left on pending futures in ``Fetcher.fetch_records``.
"""

from __future__ import annotations

from typing import Any


def pace_polls(consumer: Any) -> None:
    """Give ``consumer``'s coordinator a floor on ``time_to_next_poll`` (see the module)."""
    coordinator: Any = getattr(consumer, "_coordinator", None)
    next_poll = getattr(coordinator, "time_to_next_poll", None)
    if not callable(next_poll) or getattr(next_poll, "paced", False):
        return
    floor = float(getattr(consumer, "config", {}).get("retry_backoff_ms", 100)) / 1000

    def paced() -> float:
        return max(float(next_poll()), floor)

    paced.paced = True  # type: ignore[attr-defined]
    coordinator.time_to_next_poll = paced
