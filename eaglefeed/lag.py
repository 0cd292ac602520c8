"""Consumer lag computed by eaglefeed itself: committed offsets of a group against end offsets.

Each stage process can run a :class:`LagReporter` that refreshes lag gauges in the background,
so Prometheus needs no separate Kafka exporter; ``eaglefeed status`` uses :class:`LagProbe`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.config import KafkaConfig
from eaglefeed.kafka import make_admin
from eaglefeed.metrics import LagMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a stage: where the group is, where the topic ends, the difference."""

    topic: str
    partition: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        """Records not yet committed by the group."""
        return max(0, self.end - self.committed)


class LagProbe:
    """Measure a group's lag on a topic with one admin client.

    Args:
        kafka: broker address and security settings.
    """

    def __init__(self, *, kafka: KafkaConfig) -> None:
        self._admin = make_admin(kafka, client_id=f"{kafka.client_id}-lag")

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Partition → end offset (next offset to be written); empty if the topic is missing."""
        topics = self._admin.describe_topics([topic])
        parts = [p["partition_index"] for t in topics if t.get("error_code", 0) == 0
                 for p in t.get("partitions", [])]
        if not parts:
            return {}
        specs = {TopicPartition(topic, p): OffsetSpec.LATEST for p in parts}
        found = self._admin.list_partition_offsets(specs)
        return {tp.partition: int(res.offset) for tp, res in found.items()}

    def measure(self, group: str, topic: str) -> list[PartitionLag]:
        """The lag of ``group`` on every partition of ``topic`` (uncommitted counts from 0)."""
        ends = self.end_offsets(topic)
        committed = self._group_offsets(group)
        return [PartitionLag(topic=topic, partition=p, end=end,
                             committed=_committed(committed, topic, p))
                for p, end in sorted(ends.items())]

    def _group_offsets(self, group: str, attempts: int = 20) -> dict[TopicPartition, object]:
        # A fresh cluster answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists.
        for attempt in range(attempts):
            try:
                found: dict[str, dict[TopicPartition, object]] = self._admin.list_group_offsets({group: None})
                return found.get(group, {})
            except KafkaError as exc:
                if not getattr(exc, "retriable", False) or attempt == attempts - 1:
                    raise
                time.sleep(0.25)
        return {}

    def close(self) -> None:
        """Close the admin client."""
        self._admin.close()


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
        probe: LagProbe | None = None
        while not self._stop.is_set():
            try:
                probe = probe or LagProbe(kafka=kafka)
                for part in probe.measure(group, topic):
                    labels = (stage, part.topic, str(part.partition))
                    self._metrics.lag.labels(*labels).set(part.lag)
                    self._metrics.committed.labels(*labels).set(part.committed)
                    self._metrics.end.labels(*labels).set(part.end)
            except Exception as exc:  # noqa: BLE001 - lag is best effort; retry next tick
                log.debug("lag refresh failed: %r", exc)
                if probe is not None:
                    probe.close()
                probe = None
            self._stop.wait(self._interval)
        if probe is not None:
            probe.close()


def _committed(offsets: dict[TopicPartition, object], topic: str, partition: int) -> int:
    meta = offsets.get(TopicPartition(topic, partition))
    offset = getattr(meta, "offset", -1) if meta is not None else -1
    return max(0, int(offset))
