"""kafka-python clients with eaglefeed's defaults, and topic creation."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from eaglefeed.config import KafkaConfig

log = logging.getLogger(__name__)


def make_producer(cfg: KafkaConfig, **overrides: Any) -> KafkaProducer:
    """Build an idempotent, batching, zstd-compressing producer.

    Args:
        cfg: broker address and client id.
        **overrides: kafka-python settings that replace ours (e.g. ``transactional_id``).
    """
    settings: dict[str, Any] = {
        "bootstrap_servers": cfg.bootstrap_servers,
        "client_id": cfg.client_id,
        "acks": "all",
        "enable_idempotence": True,
        "compression_type": "zstd",
        "linger_ms": 5,
        "batch_size": 256 * 1024,
        "max_request_size": 16 * 1024 * 1024,
        "reconnect_backoff_max_ms": 5000,
    }
    settings.update(overrides)
    return KafkaProducer(**settings)


def make_consumer(cfg: KafkaConfig, group_id: str, **overrides: Any) -> KafkaConsumer:
    """Build a consumer in ``group_id`` that never commits on its own.

    Args:
        cfg: broker address and client id.
        group_id: the consumer group.
        **overrides: kafka-python settings that replace ours.
    """
    settings: dict[str, Any] = {
        "bootstrap_servers": cfg.bootstrap_servers,
        "client_id": cfg.client_id,
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
        "session_timeout_ms": 20000,
        "heartbeat_interval_ms": 2000,
        "reconnect_backoff_max_ms": 5000,
    }
    settings.update(overrides)
    return KafkaConsumer(**settings)


def ensure_topics(cfg: KafkaConfig, partitions: dict[str, int], timeout: float = 30.0) -> None:
    """Create the topics that do not exist yet; existing topics are left as they are.

    Args:
        cfg: broker address.
        partitions: topic name → partition count for topics that must be created.
        timeout: seconds to keep retrying while the broker is not reachable.
    """
    admin = _admin(cfg, timeout)
    try:
        existing = set(admin.list_topics())
        missing = {
            name: {"num_partitions": count, "replication_factor": -1}
            for name, count in partitions.items()
            if name not in existing
        }
        if missing:
            admin.create_topics(missing, raise_errors=False)
            admin.wait_for_topics(list(missing), timeout_ms=int(timeout * 1000))
            log.info("created topics %s", sorted(missing))
    finally:
        admin.close()


def pipeline_topics(cfg: KafkaConfig, partitions: int) -> dict[str, int]:
    """The three topics of a pipeline with their partition counts."""
    return {
        cfg.prompts_topic: partitions,
        cfg.generations_topic: partitions,
        cfg.dead_letter_topic: 1,
    }


def end_offsets(consumer: KafkaConsumer, partitions: Iterable[Any]) -> dict[Any, int]:
    """Return the end offsets of ``partitions`` (thin wrapper, for symmetry and typing)."""
    return dict(consumer.end_offsets(list(partitions)))


def _admin(cfg: KafkaConfig, timeout: float) -> KafkaAdminClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return KafkaAdminClient(bootstrap_servers=cfg.bootstrap_servers, client_id=cfg.client_id)
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
