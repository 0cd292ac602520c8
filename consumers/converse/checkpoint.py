"""The converse stage's checkpoint: outputs acknowledged first, input offsets committed after.

Commit order, once per polled batch:
    1. every output of the batch's records is sent (next prompts, events, dead letters);
    2. ``flush()`` waits until the broker acknowledged all of them (acks=all); a failed send
       stops the stage here, before anything is committed, except a next prompt the broker
       refuses for good (larger than it accepts): its replacement (the lane's ``ended`` event,
       ``truncated / record_too_large``) is sent and acknowledged instead;
    3. the offsets one past each partition's last processed record are committed.
The commit runs before the next ``poll()``, the only call in which a rebalance can take a
partition away, so no partition changes owner between its outputs and its commit. A crash
between 2 and 3 replays the batch: the continuation is deterministic, so it publishes the same
prompt ids again, which the workers skip (their generations are durable) and the sink drops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.consumers.converse.step import Output
from eaglefeed.core.clients import Consumer, Producer
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import DeliveryError
from eaglefeed.core.kafka import REFUSED_FOR_GOOD
from eaglefeed.core.stage import commit_positions

log = logging.getLogger(__name__)


class ConverseCheckpoint:
    """Send outputs, then commit the input offsets they came from.

    Args:
        consumer: the stage's consumer (commits go through it).
        producer: an idempotent, acks=all producer.
        kafka: names the output topics.
    """

    def __init__(self, *, consumer: Consumer, producer: Producer, kafka: KafkaConfig) -> None:
        self._consumer = consumer
        self._producer = producer
        self._topics = {"prompts": kafka.prompts_topic, "conversations": kafka.conversations_topic,
                        "dead_letter": kafka.dead_letter_topic}
        self._offsets: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}  # what this member committed last, per partition
        self._error: BaseException | None = None
        self._refused: list[Output] = []  # refused for good, to replace (appended on the IO thread)
        self.sent = 0

    def send(self, outputs: Iterable[Output]) -> None:
        """Step 1: send ``outputs`` (acknowledged at the next :meth:`commit`)."""
        for out in outputs:
            try:
                future = self._producer.send(self._topics[out.role], key=out.key, value=out.value)
            except REFUSED_FOR_GOOD:  # the producer's own size check (max_request_size)
                if out.refused is None:
                    raise
                self.send(out.refused())
                continue
            future.add_errback(self._failed if out.refused is None else self._replace(out))
            self.sent += 1

    def _replace(self, out: Output) -> Callable[[BaseException], None]:
        def failed(exc: BaseException) -> None:
            if isinstance(exc, REFUSED_FOR_GOOD):
                self._refused.append(out)  # replaced on the caller's thread, in commit()
            else:
                self._failed(exc)
        return failed

    def processed(self, tp: TopicPartition, offset: int) -> None:
        """Note that the record at ``offset`` of ``tp`` has had its outputs sent."""
        self._offsets[tp] = offset + 1

    def commit(self) -> dict[TopicPartition, int]:
        """Steps 2-3: wait for every acknowledgement, then commit what was processed.

        Returns:
            partition → the offset committed.

        Raises:
            DeliveryError: an output was not acknowledged (nothing is committed).
        """
        if not self._offsets:
            return {}
        self._producer.flush()
        while self._refused and self._error is None:
            refused, self._refused = self._refused, []
            for out in refused:
                assert out.refused is not None
                self.send(out.refused())
            self._producer.flush()
        if self._error is not None:
            raise DeliveryError(f"Kafka did not acknowledge an output: {self._error!r}; nothing was "
                                "committed and a restart continues from the last commit")
        offsets, self._offsets = self._offsets, {}
        try:
            self._consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - e.g. a rebalance: the records are replayed, which is safe
            log.warning("offset commit failed (%r); the next owner replays those records (same outputs)", exc)
            return {}
        self._committed.update(offsets)
        return offsets

    def commit_drained(self) -> dict[TopicPartition, int]:
        """With nothing processed since the last commit: commit each assigned partition's position.

        Past its last record a partition holds only transaction markers (an ``--exactly-once``
        worker's commit follows its last generation); committed one past the last record, the
        group's lag stayed 1 for good, so another member's ``--exit-when-idle`` (group-wide) and
        ``status`` never saw the partition done.

        Returns:
            partition → the offset committed.
        """
        if self._offsets:
            return {}
        return commit_positions(self._consumer, self._consumer.assignment(), self._committed)

    def _failed(self, exc: BaseException) -> None:
        # Runs on kafka-python's IO thread: keep the first failure.
        if self._error is None:
            self._error = exc
