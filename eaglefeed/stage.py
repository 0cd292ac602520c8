"""What every consuming stage sets up around its loop: metrics, lag reporting, the exit-when-idle clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from prometheus_client import CollectorRegistry

from eaglefeed.config import KafkaConfig
from eaglefeed.lag import LagReporter
from eaglefeed.metrics import LagMetrics, serve_metrics

log = logging.getLogger(__name__)

M = TypeVar("M")


@contextmanager
def stage_metrics(create: Callable[[CollectorRegistry], M], *, kafka: KafkaConfig, stage: str, group: str,
                  topic: str, port: int | None, registry: CollectorRegistry | None = None) -> Iterator[M]:
    """Build a stage's metrics, serve them, and report its group's lag while the block runs.

    Lag is only reported when the metrics are served (``port`` given): it is for the dashboard.

    Args:
        create: builds the stage's metrics on a registry (e.g. ``WorkerMetrics.create``).
        kafka: the broker the lag reporter asks.
        stage: the stage label of the lag gauges (``generate`` or ``sink``).
        group: the stage's consumer group.
        topic: the topic the stage consumes.
        port: where to serve ``/metrics`` (None: not served, no lag reporter).
        registry: the registry to use (a fresh one when None).

    Yields:
        the stage's metrics.
    """
    registry = registry or CollectorRegistry()
    metrics = create(registry)
    serve_metrics(registry, port)
    lag = None
    if port is not None:
        lag = LagReporter(kafka=kafka, stage=stage, group=group, topic=topic,
                          metrics=LagMetrics.create(registry)).start()
    try:
        yield metrics
    finally:
        if lag is not None:
            lag.stop()


class IdleClock:
    """Exit-when-idle: expired once no activity was seen for ``seconds`` (never when None).

    Args:
        seconds: the idle time after which the stage exits, or None.
        clock: the monotonic clock (a test can pass its own).
    """

    def __init__(self, *, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.last_activity = clock()

    def now(self) -> float:
        """The clock's current time."""
        return self._clock()

    def active(self, now: float | None = None) -> None:
        """Record activity (at ``now``, default the clock's time)."""
        self.last_activity = self._clock() if now is None else now

    def expired(self, now: float | None = None) -> bool:
        """Whether the stage has been idle for ``seconds`` (logs the exit when it has)."""
        if self.seconds is None:
            return False
        now = self._clock() if now is None else now
        if now - self.last_activity < self.seconds:
            return False
        log.info("idle for %.0fs: exiting", self.seconds)
        return True
