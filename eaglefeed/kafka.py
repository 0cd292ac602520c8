"""kafka-python clients with eaglefeed's defaults, and topic creation."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from eaglefeed.config import KafkaConfig
from eaglefeed.errors import ConfigError

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def make_producer(cfg: KafkaConfig, **overrides: Any) -> KafkaProducer:
    """Build an idempotent, batching, zstd-compressing producer.

    Args:
        cfg: broker address and client id.
        **overrides: kafka-python settings that replace ours (e.g. ``transactional_id``).
    """
    settings: dict[str, Any] = {
        **connection_settings(cfg),
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
        **connection_settings(cfg),
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


def make_admin(cfg: KafkaConfig, **overrides: Any) -> KafkaAdminClient:
    """Build an admin client for the broker of ``cfg``, with its security settings.

    Args:
        cfg: broker address, client id and security settings.
        **overrides: kafka-python settings that replace ours (e.g. ``client_id``).
    """
    return KafkaAdminClient(**{**connection_settings(cfg), **overrides})


def connection_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """kafka-python's address, client id and security settings for ``cfg`` (shared by every client).

    Raises:
        ConfigError: the security settings are incomplete or unknown (the message never holds
            the password).
    """
    settings: dict[str, Any] = {"bootstrap_servers": cfg.bootstrap_servers, "client_id": cfg.client_id}
    protocol = (cfg.security_protocol or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"unknown Kafka security protocol {cfg.security_protocol!r}; "
                          f"one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return settings
    settings["security_protocol"] = protocol
    if protocol.startswith("SASL_"):
        mechanism = (cfg.sasl_mechanism or "").upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"{protocol} needs --sasl-mechanism, one of {', '.join(SASL_MECHANISMS)} "
                              f"(got {cfg.sasl_mechanism!r})")
        if not cfg.sasl_username or not cfg.sasl_password:
            raise ConfigError(f"{protocol} with {mechanism} needs --sasl-username and --sasl-password")
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=cfg.sasl_username,
                        sasl_plain_password=cfg.sasl_password)
    if protocol.endswith("SSL"):
        settings.update(ssl_check_hostname=cfg.ssl_check_hostname, ssl_cafile=cfg.ssl_cafile,
                        ssl_certfile=cfg.ssl_certfile, ssl_keyfile=cfg.ssl_keyfile)
    return settings


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
            return make_admin(cfg)
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_for_topics(cfg: KafkaConfig, topics: list[str], *, stop: Any = None, poll: float = 1.0) -> bool:
    """Block until every topic in ``topics`` exists (the producer creates them).

    A consumer subscribed to a topic that does not exist yet may not see it appear for minutes
    (metadata refresh), so stages wait for their input topic before subscribing.

    Returns:
        True once the topics exist, False if ``stop`` (anything with ``is_set()``) was set first.
    """
    admin = _admin(cfg, timeout=60.0)
    logged = False
    try:
        while stop is None or not stop.is_set():
            missing = set(topics) - set(admin.list_topics())
            if not missing:
                return True
            if not logged:
                log.info("waiting for topics %s to be created (by eaglefeed produce)", sorted(missing))
                logged = True
            time.sleep(poll)
        return False
    finally:
        admin.close()
