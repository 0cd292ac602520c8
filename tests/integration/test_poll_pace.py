"""Issue 26 on a real broker: a consumer whose broker stops answering does not spin in ``poll``.

kafka-python 3.0.12 caps each wait in ``poll`` at the time to the next heartbeat, which is 0 once
a heartbeat's reply is 2 s late: ``poll`` then loops without waiting, up to a core, and leaves
a ``KafkaTimeoutError`` with its traceback on every fetch still in flight (``eaglefeed.core.poll_pace``).
The broker here is the test's own, SIGSTOPped: a heartbeat sent to it is never answered.
"""

from __future__ import annotations

import gc
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka.errors import KafkaTimeoutError

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, make_consumer, subscribe
from eaglefeed.devtools import localbroker
from tests.conftest import cache_dir, free_port

pytestmark = pytest.mark.kafka

STOPPED_S = 10.0
"""How long the broker stays stopped while the consumer polls (heartbeats every 2 s)."""


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaConfig, int]]:
    """A broker of this module's own (the tests stop it); yields its config and its pid."""
    data = tmp_path_factory.mktemp("pace-broker") / "data"
    status = localbroker.start(data_dir=data, port=free_port(), cache_dir=cache_dir())
    try:
        assert status.bootstrap_servers and status.pid
        kafka = KafkaConfig(status.bootstrap_servers, topic_prefix=f"p{uuid.uuid4().hex[:6]}")
        yield kafka, status.pid
    finally:
        localbroker.stop(data)


def live_timeouts() -> int:
    return sum(1 for obj in gc.get_objects() if isinstance(obj, KafkaTimeoutError))


def poll_while_stopped(kafka: KafkaConfig, pid: int, *, paced: bool) -> tuple[float, int]:
    """Join a group, then poll as the stages do while the broker is stopped; (CPU s, errors left)."""
    topic = f"{kafka.topic_prefix}.pace-{paced}"
    ensure_topics(kafka, {topic: 2})
    consumer = make_consumer(kafka, f"{topic}-group")
    if not paced:  # what kafka-python does on its own
        del consumer._coordinator.time_to_next_poll
    try:
        subscribe(consumer, [topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment within 30 s"
            consumer.poll(timeout_ms=200)
        for _ in range(5):
            consumer.poll(timeout_ms=200)  # fetches to the broker in flight, as in a stage
        gc.collect()
        before = live_timeouts()
        os.kill(pid, signal.SIGSTOP)
        try:
            cpu = time.thread_time()
            until = time.monotonic() + STOPPED_S
            while time.monotonic() < until:
                consumer.poll(timeout_ms=200)
            cpu = time.thread_time() - cpu
            left = live_timeouts() - before
        finally:
            os.kill(pid, signal.SIGCONT)
        return cpu, left
    finally:
        consumer.close()


def test_a_consumer_whose_broker_stopped_answering_waits_instead_of_spinning(own_broker):
    kafka, pid = own_broker
    cpu, left = poll_while_stopped(kafka, pid, paced=True)
    assert cpu < 0.5, f"poll used {cpu:.1f} s of CPU in {STOPPED_S:.0f} s while the broker was stopped"
    assert left < 1000, f"{left} KafkaTimeoutErrors were left alive by {STOPPED_S:.0f} s of polling"


def test_without_the_floor_kafka_python_spins(own_broker):
    """The upstream behaviour the floor works around: when this fails, the floor may go.

    Judged by the errors left (23,400 here on an idle machine), not the CPU, which load can lower.
    """
    kafka, pid = own_broker
    _cpu, left = poll_while_stopped(kafka, pid, paced=False)
    assert left > 1000, f"only {left} KafkaTimeoutErrors: has kafka-python stopped spinning?"
