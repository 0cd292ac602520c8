"""The converse stage's checkpoint: outputs acknowledged first, input offsets committed after.

Commit order, once per polled batch:
    1. every output of the batch's records is sent (next prompts, events, dead letters);
    2. ``flush()`` waits until the broker acknowledged all of them (acks=all); a failed send
       stops the stage here, before anything is committed;
    3. the offsets one past each partition's last processed record are committed.
The commit runs before the next ``poll()``, the only call in which a rebalance can take a
partition away, so no partition changes owner between its outputs and its commit. A crash
between 2 and 3 replays the batch: the continuation is deterministic, so it publishes the same
prompt ids again, which the workers skip (their generations are durable) and the sink drops.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kafka.structs import OffsetAndMetadata, TopicPartition

from consumers.converse.step import Output
from eaglefeed.config import KafkaConfig
from eaglefeed.errors import DeliveryError
from eaglefeed.kafka import Consumer, Producer

log = logging.getLogger(__name__)


class Checkpoint:
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
        self._error: BaseException | None = None
        self.sent = 0

    def send(self, outputs: Iterable[Output]) -> None:
        """Step 1: send ``outputs`` (acknowledged at the next :meth:`commit`)."""
        for out in outputs:
            future = self._producer.send(self._topics[out.role], key=out.key, value=out.value)
            future.add_errback(self._failed)
            self.sent += 1

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
        if self._error is not None:
            raise DeliveryError(f"Kafka did not acknowledge an output: {self._error!r}; nothing was "
                                "committed and a restart continues from the last commit")
        offsets, self._offsets = self._offsets, {}
        try:
            self._consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001 - e.g. a rebalance: the records are replayed, which is safe
            log.warning("offset commit failed (%r); the next owner replays those records (same outputs)", exc)
            return {}
        return offsets

    def _failed(self, exc: BaseException) -> None:
        # Runs on kafka-python's IO thread: keep the first failure.
        if self._error is None:
            self._error = exc
