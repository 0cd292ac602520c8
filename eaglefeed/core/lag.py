"""Consumer lag computed by eaglefeed itself: committed offsets of a group against end offsets.

Each stage process can run a :class:`LagReporter` that refreshes lag gauges in the background,
so Prometheus needs no separate Kafka exporter; ``eaglefeed status`` uses :class:`LagProbe`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kafka import KafkaAdminClient
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.structs import TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import make_admin
from eaglefeed.core.metrics import LagMetrics

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a stage: where the group is, where the topic ends, the difference."""

    topic: str
    partition: int
    committed: int
    end: int
    metadata: str = ""
    """The committed offset's metadata (a generate commit lists offsets finished above it)."""

    @property
    def lag(self) -> int:
        """Records not yet committed by the group."""
        return max(0, self.end - self.committed)


RETRY_SECONDS = 30.0
"""How long a :class:`LagProbe` keeps asking through retriable errors: a cluster node that dies
takes about 10 s to be fenced, its partitions' leadership and its groups' coordination moving
to the other nodes only then."""


class LagProbe:
    """Measure a group's lag on a topic with one admin client.

    A request that meets a retriable error (a node down, a coordinator moving) is asked again
    on a new admin client until ``retry_seconds`` pass: kafka-python 3.0.12's admin client
    keeps sending a group's requests to its former coordinator after that node stopped
    (seen for more than 10 s, while a new client found the new coordinator at once).

    Args:
        kafka: broker address and security settings.
        retry_seconds: how long to keep asking (see :data:`RETRY_SECONDS`).
    """

    def __init__(self, *, kafka: KafkaConfig, retry_seconds: float = RETRY_SECONDS) -> None:
        self._kafka = kafka
        self._retry_seconds = retry_seconds
        self._admin = self._connect()

    def end_offsets(self, topic: str, *, stable: bool = False) -> dict[int, int]:
        """Partition → end offset (next offset to be written); empty if the topic is missing.

        With ``stable`` the end is the last stable offset (what a ``read_committed`` consumer can
        reach: the first offset of a transaction still open), else the log end.
        """
        return self._ask(lambda admin: _end_offsets(admin, topic, stable=stable))

    def topics(self) -> set[str]:
        """The names of every topic on the cluster."""
        return self._ask(lambda admin: set(admin.list_topics()))

    def measure(self, group: str, topic: str, *, stable: bool = False) -> list[PartitionLag]:
        """The lag of ``group`` on every partition of ``topic`` (uncommitted counts from 0).

        ``stable``: measure to the last stable offset (see :meth:`end_offsets`).
        """
        ends = self.end_offsets(topic, stable=stable)
        # A fresh cluster answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists.
        committed = self._ask(lambda admin: admin.list_group_offsets({group: None}).get(group, {}))
        return [PartitionLag(topic=topic, partition=p, end=end, committed=_committed(committed, topic, p),
                             metadata=_metadata(committed, topic, p))
                for p, end in sorted(ends.items())]

    def members(self, group: str) -> int:
        """How many members ``group`` has now (0 for a group that does not exist)."""
        info = self._ask(lambda admin: admin.describe_groups([group]).get(group) or {})
        return len(info.get("members") or ())

    def close(self) -> None:
        """Close the admin client."""
        self._admin.close()

    def _connect(self) -> KafkaAdminClient:
        return make_admin(self._kafka, client_id=f"{self._kafka.client_id}-lag")

    def _ask(self, question: Callable[[KafkaAdminClient], T]) -> T:
        deadline = time.monotonic() + self._retry_seconds
        while True:
            try:
                return question(self._admin)
            except KafkaError as exc:
                if not getattr(exc, "retriable", False) or time.monotonic() >= deadline:
                    raise
                log.debug("lag probe: %r; asking again with a new admin client", exc)
            time.sleep(0.25)
            self._admin.close()
            self._admin = self._connect()


def _end_offsets(admin: KafkaAdminClient, topic: str, *, stable: bool) -> dict[int, int]:
    topics = admin.describe_topics([topic])
    parts = [p["partition_index"] for t in topics if t.get("error_code", 0) == 0
             for p in t.get("partitions", [])]
    if not parts:
        return {}
    specs = {TopicPartition(topic, p): OffsetSpec.LATEST for p in parts}
    isolation = IsolationLevel.READ_COMMITTED if stable else IsolationLevel.READ_UNCOMMITTED
    found = admin.list_partition_offsets(specs, isolation_level=isolation)
    return {tp.partition: int(res.offset) for tp, res in found.items()}


SESSION_RETRY_SECONDS = 5.0
"""A background loop's probe gives up sooner: its next reading starts over anyway."""


class ProbeSession:
    """A :class:`LagProbe` for a background loop: opened on first use, dropped after any failure.

    A broker that is down (on purpose, in a reliability run) or restarting fails a reading; the
    next reading connects again instead of reusing a broken admin client.

    Args:
        kafka: broker address and security settings.
    """

    def __init__(self, *, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._probe: LagProbe | None = None

    def read(self, reading: Callable[[LagProbe], T]) -> T | None:
        """``reading(probe)``, or None when it failed (the probe is closed; the next read reconnects)."""
        try:
            self._probe = self._probe or LagProbe(kafka=self._kafka, retry_seconds=SESSION_RETRY_SECONDS)
            return reading(self._probe)
        except Exception as exc:  # noqa: BLE001 - best effort; the caller tries again next tick
            log.debug("lag reading failed (reconnecting next time): %r", exc)
            self.close()
            return None

    def close(self) -> None:
        """Close the probe, if one is open."""
        if self._probe is not None:
            probe, self._probe = self._probe, None
            probe.close()


class GroupBacklog:
    """What a consumer group has still to read of a topic, partition by partition.

    The records between the group's committed offset and the partition's last stable offset, as
    a ``read_committed`` member sees the topic. Asked over an admin client of its own, never the
    stage consumer's connections: a question to the group coordinator on the consumer's thread
    can hold up the member's own rejoin.

    Args:
        kafka: broker address and security settings.
    """

    def __init__(self, *, kafka: KafkaConfig) -> None:
        self._session = ProbeSession(kafka=kafka)

    def read(self, group: str, topic: str) -> dict[int, int] | None:
        """Partition → records not yet committed by ``group``, or None when the broker did not answer."""
        return self._session.read(
            lambda probe: {p.partition: p.lag for p in probe.measure(group, topic, stable=True)})

    def members(self, group: str) -> int | None:
        """How many members ``group`` has now (0: none, or no such group); None: the broker did not answer."""
        return self._session.read(lambda probe: probe.members(group))

    def close(self) -> None:
        """Close the admin client, if one is open."""
        self._session.close()


class LagReporter:
    """Refresh the lag gauges of one stage every ``interval`` seconds in a daemon thread.

    Args:
        kafka: broker address.
        stage: the stage label (``generate`` or ``sink``).
        group: the stage's consumer group.
        topic: the topic the stage consumes.
        metrics: the gauges to set.
        interval: seconds between refreshes.
    """

    def __init__(self, *, kafka: KafkaConfig, stage: str, group: str, topic: str,
                 metrics: LagMetrics, interval: float = 5.0) -> None:
        self._args = (kafka, stage, group, topic)
        self._metrics = metrics
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lag-{stage}", daemon=True)

    def start(self) -> LagReporter:
        """Start refreshing; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop refreshing (does not wait for an in-progress refresh)."""
        self._stop.set()

    def _run(self) -> None:
        kafka, stage, group, topic = self._args
        session = ProbeSession(kafka=kafka)
        while not self._stop.is_set():
            for part in session.read(lambda probe: probe.measure(group, topic)) or []:
                labels = (stage, part.topic, str(part.partition))
                self._metrics.lag.labels(*labels).set(part.lag)
                self._metrics.committed.labels(*labels).set(part.committed)
                self._metrics.end.labels(*labels).set(part.end)
            self._stop.wait(self._interval)
        session.close()


def _committed(offsets: dict[TopicPartition, object], topic: str, partition: int) -> int:
    meta = offsets.get(TopicPartition(topic, partition))
    offset = getattr(meta, "offset", -1) if meta is not None else -1
    return max(0, int(offset))


def _metadata(offsets: dict[TopicPartition, object], topic: str, partition: int) -> str:
    meta = offsets.get(TopicPartition(topic, partition))
    return str(getattr(meta, "metadata", "") or "")
