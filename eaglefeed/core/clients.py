"""The seam the stage loops use for Kafka: the calls they make, and the real clients behind them.

The loops never build clients themselves: they take a :class:`Clients` (by default
:class:`KafkaClients`, kafka-python built by :mod:`eaglefeed.core.kafka`) and use only the calls of
:class:`Consumer`, :class:`Reader` and :class:`Producer`, so a unit test can hand them an in-memory
fake (``tests/fakes/kafka.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import (
    ensure_topics,
    make_consumer,
    make_producer,
    make_reader,
    subscribe,
    wait_for_topics,
)
from eaglefeed.core.lag import GroupBacklog
from eaglefeed.core.lifecycle import StopFlag

Offsets: TypeAlias = "Mapping[TopicPartition, OffsetAndMetadata]"
Listener: TypeAlias = "ConsumerRebalanceListener | AsyncConsumerRebalanceListener"


class Record(Protocol):
    """A consumed record (the fields the loops read of kafka-python's ``ConsumerRecord``)."""

    @property
    def topic(self) -> str: ...  # noqa: D102
    @property
    def partition(self) -> int: ...  # noqa: D102
    @property
    def offset(self) -> int: ...  # noqa: D102
    @property
    def key(self) -> bytes | None: ...  # noqa: D102
    @property
    def value(self) -> bytes | None: ...  # noqa: D102


class SendFuture(Protocol):
    """What ``send`` returns: settled by the producer's IO thread (callbacks run there)."""

    def add_callback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102
    def add_errback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102
    def get(self, timeout: float | None = None) -> Any: ...  # noqa: D102


class Consumer(Protocol):
    """The consumer calls the stage loops make (kafka-python's ``KafkaConsumer`` has them all)."""

    def poll(self, timeout_ms: int = 0, max_records: int | None = None  # noqa: D102
             ) -> Mapping[TopicPartition, Sequence[Record]]: ...
    def pause(self, *partitions: TopicPartition) -> None: ...  # noqa: D102
    def resume(self, *partitions: TopicPartition) -> None: ...  # noqa: D102
    def paused(self) -> set[TopicPartition]: ...  # noqa: D102
    def assignment(self) -> set[TopicPartition]: ...  # noqa: D102
    def commit(self, offsets: Offsets | None = None) -> None: ...  # noqa: D102
    def commit_async(self, offsets: Offsets | None = None) -> Awaitable[Any]: ...  # noqa: D102
    def committed(self, partition: TopicPartition, metadata: bool = False,  # noqa: D102
                  timeout_ms: int | None = None) -> Any: ...
    def position(self, partition: TopicPartition, timeout_ms: int | None = None  # noqa: D102
                 ) -> int | None: ...
    def end_offsets(self, partitions: list[TopicPartition], timeout_ms: int | None = None  # noqa: D102
                    ) -> Mapping[TopicPartition, int]: ...
    def seek(self, partition: TopicPartition, offset: int) -> None: ...  # noqa: D102
    def seek_to_beginning(self, *partitions: TopicPartition) -> None: ...  # noqa: D102
    def beginning_offsets(self, partitions: list[TopicPartition], timeout_ms: int | None = None  # noqa: D102
                          ) -> Mapping[TopicPartition, int]: ...
    def unsubscribe(self) -> None: ...  # noqa: D102
    def group_metadata(self) -> Any: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


class Reader(Protocol):
    """A consumer in no group that assigns itself partitions: the calls a topic reader makes.

    ``position`` takes no timeout here, so it blocks until the offset is known (never None).
    """

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...  # noqa: D102
    def assign(self, partitions: list[TopicPartition]) -> None: ...  # noqa: D102
    def beginning_offsets(self, partitions: list[TopicPartition], timeout_ms: int | None = None  # noqa: D102
                          ) -> Mapping[TopicPartition, int]: ...
    def end_offsets(self, partitions: list[TopicPartition], timeout_ms: int | None = None  # noqa: D102
                    ) -> Mapping[TopicPartition, int]: ...
    def seek(self, partition: TopicPartition, offset: int) -> None: ...  # noqa: D102
    def position(self, partition: TopicPartition) -> int: ...  # noqa: D102
    def poll(self, timeout_ms: int = 0, max_records: int | None = None  # noqa: D102
             ) -> Mapping[TopicPartition, Sequence[Record]]: ...
    def close(self) -> None: ...  # noqa: D102


class Producer(Protocol):
    """The producer calls the stage loops make, transactions included."""

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None  # noqa: D102
             ) -> SendFuture: ...
    def flush(self, timeout: float | None = None) -> None: ...  # noqa: D102
    def close(self, timeout: float | None = None) -> None: ...  # noqa: D102
    def init_transactions(self) -> None: ...  # noqa: D102
    def begin_transaction(self) -> None: ...  # noqa: D102
    def send_offsets_to_transaction(self, offsets: Offsets,  # noqa: D102
                                    consumer_group_metadata: Any) -> None: ...
    def commit_transaction(self) -> None: ...  # noqa: D102
    def abort_transaction(self) -> None: ...  # noqa: D102


class Backlog(Protocol):
    """What a consumer group has still to read of a topic (see :class:`~eaglefeed.core.lag.GroupBacklog`)."""

    def read(self, group: str, topic: str) -> Mapping[int, int] | None: ...  # noqa: D102
    def members(self, group: str) -> int | None: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


class Clients(Protocol):
    """Where a stage gets its Kafka clients from (the real broker, or a fake in unit tests)."""

    def consumer(self, group_id: str, **overrides: Any) -> Consumer: ...  # noqa: D102
    def reader(self, **settings: Any) -> Reader: ...  # noqa: D102
    def producer(self, **overrides: Any) -> Producer: ...  # noqa: D102
    def subscribe(self, consumer: Consumer, topics: list[str], listener: Listener) -> None: ...  # noqa: D102
    def wait_for_topics(self, topics: list[str], stop: StopFlag | None,  # noqa: D102
                        timeout: float | None = None) -> bool: ...
    def backlog(self) -> Backlog: ...  # noqa: D102
    def ensure_topics(self, partitions: dict[str, int], *,  # noqa: D102
                      configs: Mapping[str, Mapping[str, str]] | None = None) -> set[str]: ...


class KafkaClients:
    """The real clients: kafka-python with our defaults (:func:`make_consumer`, :func:`make_producer`).

    Args:
        kafka: broker address, client id and security settings.
    """

    def __init__(self, *, kafka: KafkaConfig) -> None:
        self.kafka = kafka

    def consumer(self, group_id: str, **overrides: Any) -> Consumer:
        """A consumer in ``group_id`` that never commits on its own (see :func:`make_consumer`)."""
        consumer: Consumer = make_consumer(self.kafka, group_id, **overrides)
        return consumer

    def reader(self, **settings: Any) -> Reader:
        """A consumer in no group with kafka-python's defaults and ``settings``, built in one attempt.

        No :func:`make_consumer` retries: a reader that cannot reach the broker raises its
        ``KafkaError`` at once, and its caller decides what that costs.
        """
        reader: Reader = make_reader(self.kafka, **settings)
        return reader

    def producer(self, **overrides: Any) -> Producer:
        """An idempotent producer (see :func:`make_producer`)."""
        producer: Producer = make_producer(self.kafka, **overrides)
        return producer

    def subscribe(self, consumer: Consumer, topics: list[str], listener: Listener) -> None:
        """Subscribe ``consumer`` (one of ours) to ``topics`` (see :func:`subscribe`)."""
        subscribe(consumer, topics, listener=listener)

    def wait_for_topics(self, topics: list[str], stop: StopFlag | None, timeout: float | None = None) -> bool:
        """Block until ``topics`` exist, for at most ``timeout`` seconds (see :func:`wait_for_topics`)."""
        return wait_for_topics(self.kafka, topics, stop=stop, timeout=timeout)

    def backlog(self) -> Backlog:
        """A group's unread records per partition, asked over an admin client of its own."""
        return GroupBacklog(kafka=self.kafka)

    def ensure_topics(self, partitions: dict[str, int], *,
                      configs: Mapping[str, Mapping[str, str]] | None = None) -> set[str]:
        """Create the topics of ``partitions`` that do not exist yet (see :func:`ensure_topics`)."""
        return ensure_topics(self.kafka, partitions, configs=configs)


def partition_name(tp: TopicPartition) -> str:
    """One partition as log lines name it: ``demo.prompts-2``."""
    return f"{tp.topic}-{tp.partition}"


def partition_names(partitions: Iterable[TopicPartition]) -> str:
    """Partitions as a person reads them: ``demo.prompts partitions 0, 2, 5`` (topics joined by ``; ``)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    clauses = [f"{topic} partition{'s' if len(numbers) > 1 else ''} {', '.join(map(str, sorted(numbers)))}"
               for topic, numbers in sorted(by_topic.items())]
    return "; ".join(clauses) or "no partitions"
