"""What every consuming stage sets up around its loop: metrics, lag reporting, the caught-up exit clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.core.clients import Backlog, Consumer
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.lag import LagReporter
from eaglefeed.core.metrics import LagMetrics, serve_metrics

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


@dataclass(frozen=True)
class Upstream:
    """The stage feeding this one, at one probe: its group on its input topic.

    Attributes:
        group: the upstream consumer group (the generate workers').
        topic: the topic it consumes (the prompts).
        lag: records it has not committed yet (None: the broker did not answer).
        members: how many members it has now (asked only while it has lag).
    """

    group: str
    topic: str
    lag: int | None
    members: int = 0

    @property
    def working(self) -> bool:
        """Upstream has work left and someone to do it: a downstream stage is not finished yet."""
        return self.lag is None or (self.lag > 0 and self.members > 0)

    @property
    def stalled(self) -> bool:
        """Upstream has work left and no member to do it."""
        return self.lag is not None and self.lag > 0 and self.members == 0


def upstream_lag(backlog: Backlog, *, group: str, topic: str) -> Upstream:
    """What ``group`` has still to do of ``topic``, and whether it has members to do it.

    Ask it before the stage's own lag: the upstream stage publishes its results before it
    commits, so an upstream lag of 0 followed by an own lag of 0 means everything was read.
    """
    unread = backlog.read(group, topic)
    if unread is None:
        return Upstream(group=group, topic=topic, lag=None)
    lag = sum(unread.values())
    members = backlog.members(group) if lag else 0
    if members is None:
        return Upstream(group=group, topic=topic, lag=None)
    return Upstream(group=group, topic=topic, lag=lag, members=members)


class IdleClock:
    """Exit-when-idle, meaning *caught up* continuously for ``seconds`` (never when None).

    Caught up: the stage holds its assignment, has nothing in flight, every assigned partition's
    position has reached its end offset, and the group has committed everything of the other
    partitions (see :func:`group_lag`).

    The loop reports each turn with :meth:`observe` (was there work?); when it returns True the
    loop measures its lag (:func:`group_lag`, broker round trips, so at most once per
    ``probe_every``) and reports it with :meth:`probed`. Any work, any lag, or an unknown lag
    (no assignment yet, broker not answering) starts the count again.

    A stage that passes its :class:`Upstream` to :meth:`probed` is not caught up while upstream
    is :attr:`~Upstream.working`; when it exits with upstream :attr:`~Upstream.stalled` (lag and
    no member), :attr:`upstream` says so, for the stage's exit line.

    Args:
        seconds: how long the stage must stay caught up before it exits, or None.
        clock: the monotonic clock (a test can pass its own).
        probe_every: seconds between lag probes (default: a quarter of ``seconds``, at most 1 s).
    """

    def __init__(self, *, seconds: float | None, clock: Callable[[], float] = time.monotonic,
                 probe_every: float | None = None) -> None:
        self.seconds = seconds
        self._clock = clock
        self.probe_every = probe_every if probe_every is not None else min(1.0, (seconds or 4.0) / 4)
        self.caught_up_since: float | None = None
        self.lag: int | None = None  # at the last probe (None: not known)
        self.upstream: Upstream | None = None  # at the last probe (None: not asked)
        self._last_probe: float | None = None

    def now(self) -> float:
        """The clock's current time."""
        return self._clock()

    def observe(self, now: float, *, busy: bool) -> bool:
        """Note whether the stage had work this turn; True when a lag probe is due.

        Args:
            now: the clock's time.
            busy: records came in, or something is buffered or in flight.
        """
        if self.seconds is None:
            return False
        if busy:
            self._reset()
            return False
        return self._last_probe is None or now - self._last_probe >= self.probe_every

    def probed(self, lag: int | None, now: float, *, upstream: Upstream | None = None) -> None:
        """Record a lag probe's result: 0 keeps (or starts) the caught-up count, anything else resets it.

        Args:
            lag: the stage's own lag (:func:`group_lag`).
            now: the clock's time.
            upstream: the stage feeding this one, asked before ``lag``; while it is working the
                count starts again.
        """
        self._last_probe, self.lag, self.upstream = now, lag, upstream
        if lag != 0 or (upstream is not None and upstream.working):
            self.caught_up_since = None
        elif self.caught_up_since is None:
            self.caught_up_since = now

    def expired(self, now: float | None = None) -> bool:
        """Whether the stage has been caught up for ``seconds`` (logs the exit when it has)."""
        if self.seconds is None or self.caught_up_since is None:
            return False
        now = self._clock() if now is None else now
        if now - self.caught_up_since < self.seconds:
            return False
        if self.upstream is not None and self.upstream.stalled:
            log.warning("caught up (lag 0) for %.0fs, but %s holds %d records of %s and has no member: "
                        "exiting", self.seconds, self.upstream.group, self.upstream.lag, self.upstream.topic)
        else:
            log.info("caught up (lag 0) for %.0fs: exiting", self.seconds)
        return True

    def _reset(self) -> None:
        self.caught_up_since = None
        self._last_probe = None


def consumer_lag(consumer: Consumer, *, timeout_ms: int = 5000) -> int | None:
    """Records between each assigned partition's position and its end offset, summed.

    Call it on the consumer's thread. With ``read_committed`` the end offset is the last stable
    offset, and positions move past transaction markers, so a consumer that read everything has 0.

    Returns:
        the lag, or None when the consumer holds no partition (not joined yet, or nothing
        assigned) or the broker did not answer in time.
    """
    assigned = consumer.assignment()
    if not assigned:
        return None
    try:
        ends = consumer.end_offsets(list(assigned), timeout_ms=timeout_ms)
        lag = 0
        for tp in assigned:
            position = consumer.position(tp, timeout_ms=timeout_ms)
            end = ends.get(tp)
            if position is None or end is None:
                return None
            lag += max(0, end - position)
    except KafkaError as exc:  # e.g. a rebalance took the partition meanwhile
        log.debug("cannot measure the lag (%r)", exc)
        return None
    return lag


def group_lag(consumer: Consumer, backlog: Backlog, *, group: str, topics: list[str]) -> int | None:
    """What the group has still to read: this member's partitions and every other one of ``topics``.

    A member caught up on its own partitions is not caught up while another member holds
    unread records, e.g. one SIGKILLed whose session has not expired yet: its partitions come
    to this member only at the next rebalance. Those partitions count from the group's committed
    offset, asked through ``backlog`` (an admin client of its own, so nothing here waits on the
    group coordinator of the consumer, which is busy during a rebalance). Call it on the
    consumer's thread; the backlog is asked only once the member's own lag is 0.

    Returns:
        the lag, or None when it is not known (see :func:`consumer_lag`; or no answer about the
        group's offsets).
    """
    own = consumer_lag(consumer)
    if own != 0:
        return own
    assigned = consumer.assignment()
    total = 0
    for topic in topics:
        unread = backlog.read(group, topic)
        if unread is None:
            return None
        total += sum(n for p, n in unread.items() if TopicPartition(topic, p) not in assigned)
    return total


def commit_positions(consumer: Consumer, partitions: Iterable[TopicPartition],
                     committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Commit each partition's position where it moved past ``committed`` (updated); what was committed.

    For a reader with nothing buffered or in flight: past its last record a partition holds only
    transaction markers (an ``--exactly-once`` worker's commit follows its last record), and a
    commit one past that record left the group's lag at 1 for good, so another member's
    group-wide ``--exit-when-idle`` and ``status`` never saw the partition done. A partition
    whose position is unknown now is left for the next call, and a failed commit too.
    """
    offsets = {}
    for tp in partitions:
        try:
            position = consumer.position(tp, timeout_ms=0)
        except KafkaError:
            continue
        if position is not None and position > committed.get(tp, -1):
            offsets[tp] = position
    if not offsets:
        return {}
    try:
        consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
    except Exception as exc:  # noqa: BLE001 - advisory: nothing is lost, the next call tries again
        log.debug("commit of drained positions failed (%r)", exc)
        return {}
    committed.update(offsets)
    return offsets
