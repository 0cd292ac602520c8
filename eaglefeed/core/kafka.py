"""kafka-python clients with eaglefeed's defaults and security settings, and topic creation.

The stage loops never call these builders themselves: they go through the seam of
:mod:`eaglefeed.core.clients`, whose :class:`~eaglefeed.core.clients.KafkaClients` builds with them.
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import InvalidRecordError, KafkaError, MessageSizeTooLargeError, RecordListTooLargeError

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.connect import connect
from eaglefeed.core.errors import ConfigError, MissingTopicError
from eaglefeed.core.lifecycle import StopFlag
from eaglefeed.core.poll_pace import pace_polls

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")

SESSION_TIMEOUT_MS = 20000
"""The consumers' group session timeout unless a stage's ``--session-timeout`` says otherwise."""

REFUSED_FOR_GOOD = (MessageSizeTooLargeError, RecordListTooLargeError, InvalidRecordError)
"""Errors that re-sending the same record can never cure: it is larger than the broker (or the
producer's ``max_request_size``) accepts, or the broker's validation rejects it."""

TOPIC_SUFFIXES = ("prompts", "generations", "dead-letter", "conversations", "redriven", "workers", "sinks")
"""What follows ``<prefix>.`` in the name of each topic a pipeline makes."""

MAX_PREFIXES_SHOWN = 10
"""How many topic prefixes a line about a missing topic names at most."""

T = TypeVar("T")


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
    return connect(lambda ms: KafkaProducer(**{"bootstrap_timeout_ms": ms, **settings}), cfg, "producer")


def make_consumer(cfg: KafkaConfig, group_id: str | None, **overrides: Any) -> KafkaConsumer:
    """Build a consumer in ``group_id`` that never commits on its own.

    Args:
        cfg: broker address and client id.
        group_id: the consumer group (None: no group, for a reader that assigns partitions itself).
        **overrides: kafka-python settings that replace ours.
    """
    settings: dict[str, Any] = {
        **connection_settings(cfg),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        # Fetched-but-unread data is memory: keep the fetch window small (a few MB per poll).
        "max_partition_fetch_bytes": 1024 * 1024,
        "fetch_max_bytes": 8 * 1024 * 1024,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": 2000,
        "reconnect_backoff_max_ms": 5000,
    }
    settings.update(overrides)
    consumer = connect(lambda ms: KafkaConsumer(**{"bootstrap_timeout_ms": ms, **settings}), cfg, "consumer")
    return pace_polls(consumer)  # no busy poll while a heartbeat goes unanswered (kafka-python 3.0.12)


def make_reader(cfg: KafkaConfig, **settings: Any) -> KafkaConsumer:
    """Build a consumer in no group with kafka-python's defaults and ``settings``, in one attempt.

    No :func:`make_consumer` retries: a reader that cannot reach the broker raises its
    ``KafkaError`` at once, and its caller decides what that costs.

    Args:
        cfg: broker address, client id and security settings.
        **settings: kafka-python settings (e.g. ``auto_offset_reset``).
    """
    return KafkaConsumer(**connection_settings(cfg), group_id=None, **settings)


def subscribe(consumer: KafkaConsumer, topics: list[str], **kwargs: Any) -> None:
    """Subscribe ``consumer`` to ``topics`` once its metadata lists their partitions.

    Otherwise the group's first join runs before the consumer's first metadata response: the
    assignment comes out empty and only a rejoin brings the partitions, and with kafka-python
    3.0.12 that rejoin was seen to never happen (about one start in ten; the stage sat idle).

    Then one more metadata fetch, once subscribed: kafka-python's coordinator notes the
    subscribed topics' partitions (its "metadata snapshot") only when a metadata response
    arrives after ``subscribe``. Joined without it, the first assignment is followed, at the
    next metadata response, by a rebalance of the whole group ("assignment snapshot != metadata
    snapshot"): every stage start rebalanced its group once more, a second or two later.

    Args:
        consumer: a consumer with a group id.
        topics: the topics, which must exist (see :func:`wait_for_topics`).
        **kwargs: passed to ``KafkaConsumer.subscribe`` (e.g. ``listener``).
    """
    for topic in topics:
        try:
            consumer.partitions_for_topic(topic)  # a blocking metadata fetch when the topic is not cached
        except KafkaError as exc:  # e.g. the broker is restarting: subscribe all the same
            log.warning("cannot load the partitions of %s (%r)", topic, exc)
    consumer.subscribe(topics, **kwargs)
    try:
        consumer.topics()  # a metadata response the coordinator sees subscribed: its snapshot is set
    except KafkaError as exc:  # the first poll's metadata does it, at the cost of one more rebalance
        log.warning("cannot load the metadata of %s (%r)", topics, exc)


def make_admin(cfg: KafkaConfig, **overrides: Any) -> KafkaAdminClient:
    """Build an admin client for the broker of ``cfg``, with its security settings.

    It tries to reach the broker for up to ``cfg.connect_timeout`` seconds (see
    :func:`eaglefeed.core.connect.connect`).

    Args:
        cfg: broker address, client id and security settings.
        **overrides: kafka-python settings that replace ours (e.g. ``client_id``).
    """
    settings = {**connection_settings(cfg), **overrides}
    return connect(lambda ms: KafkaAdminClient(**{"bootstrap_timeout_ms": ms, **settings}), cfg,
                   "admin client")


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


def ensure_topics(cfg: KafkaConfig, partitions: dict[str, int], timeout: float | None = None, *,
                  configs: Mapping[str, Mapping[str, str]] | None = None) -> set[str]:
    """Create the topics that do not exist yet (and return their names); existing topics are left as they are.

    Args:
        cfg: broker address.
        partitions: topic name → partition count for topics that must be created.
        timeout: seconds to keep retrying while the broker is not reachable (default
            ``cfg.connect_timeout``).
        configs: topic name → topic configs of a topic that is created (e.g. ``cleanup.policy``).
    """
    timeout = cfg.connect_timeout if timeout is None else timeout
    deadline = time.monotonic() + timeout
    admin = make_admin(cfg)
    try:
        existing = set(retrying(admin.list_topics, deadline, "listing topics"))
        missing = {
            name: {"num_partitions": count, "replication_factor": -1,
                   **({"configs": dict(configs[name])} if configs and name in configs else {})}
            for name, count in partitions.items()
            if name not in existing
        }
        if missing:
            # Retried whole: a topic created by an earlier attempt is "already exists", not an error.
            retrying(lambda: admin.create_topics(missing, raise_errors=False), deadline, "creating topics")
            retrying(lambda: admin.wait_for_topics(list(missing), timeout_ms=int(timeout * 1000)),
                     deadline, "waiting for the new topics")
            log.info("created topics %s", sorted(missing))
        return set(missing)
    finally:
        admin.close()


def retrying(call: Callable[[], T], deadline: float, what: str, pause: float = 0.5) -> T:
    """``call()``, called again after a retriable Kafka error until ``deadline`` (``time.monotonic()``).

    An admin request goes to one node: in a cluster with a node down it can pick the dead one
    (a bootstrap address, or a broker the metadata still lists) and fail with a connection error
    at once. The same client asked again avoids that node (it is in reconnect backoff).
    """
    while True:
        try:
            return call()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() + pause >= deadline:
                raise
            log.warning("%s failed (%r); trying again", what, exc)
            time.sleep(pause)


def pipeline_topics(cfg: KafkaConfig, partitions: int) -> dict[str, int]:
    """The topics of a pipeline with their partition counts (the conversations topic is small)."""
    return {
        cfg.prompts_topic: partitions,
        cfg.generations_topic: partitions,
        cfg.dead_letter_topic: 1,
        cfg.conversations_topic: 1,
    }


def wait_for_topics(cfg: KafkaConfig, topics: list[str], *, stop: StopFlag | None = None,
                    poll: float = 1.0, timeout: float | None = None) -> bool:
    """Block until every topic in ``topics`` exists (the producer creates them).

    A consumer subscribed to a topic that does not exist yet may not see it appear for minutes
    (metadata refresh), so stages wait for their input topic before subscribing. The line that
    says so names the topic prefixes the broker holds (a mistyped ``--topic-prefix`` shows there).

    Args:
        cfg: the broker, and the topic prefix the stage was given.
        topics: the topics to wait for.
        stop: anything with ``is_set()``: stop waiting when it is set.
        poll: seconds between two listings.
        timeout: seconds to wait at most (a stage's ``--exit-when-idle``), or None for ever.

    Returns:
        True once the topics exist, False if ``stop`` was set first.

    Raises:
        MissingTopicError: ``timeout`` passed and a topic is still missing.
    """
    admin = make_admin(cfg)
    started = time.monotonic()
    logged = False
    try:
        while stop is None or not stop.is_set():
            try:
                present = set(admin.list_topics())
            except KafkaError as exc:  # the broker may be restarting: ask again
                if not exc.retriable:
                    raise
                log.warning("cannot list topics (%r); trying again", exc)
                time.sleep(poll)
                continue
            missing = sorted(set(topics) - present)
            if not missing:
                return True
            if timeout is not None and time.monotonic() - started >= timeout:
                raise MissingTopicError(f"no topic {', '.join(missing)} after {timeout:g} s; "
                                        f"{describe_prefixes(topic_prefixes(present), cfg.topic_prefix)}")
            if not logged:
                log.info("waiting for topics %s to be created (by eaglefeed produce); %s", missing,
                         describe_prefixes(topic_prefixes(present), cfg.topic_prefix))
                logged = True
            time.sleep(poll)
        return False
    finally:
        admin.close()


def topic_prefixes(topics: Iterable[str]) -> list[str]:
    """The topic prefixes of the eaglefeed topics (``<prefix>.prompts``, ...) among ``topics``, sorted."""
    found = set()
    for topic in topics:
        prefix, dot, suffix = topic.rpartition(".")
        if dot and prefix and suffix in TOPIC_SUFFIXES:
            found.add(prefix)
    return sorted(found)


def describe_prefixes(prefixes: list[str], wanted: str) -> str:
    """``prefixes on the broker: a, b`` (the ``MAX_PREFIXES_SHOWN`` closest to ``wanted`` when more)."""
    if not prefixes:
        return "the broker holds no eaglefeed topics"
    if len(prefixes) <= MAX_PREFIXES_SHOWN:
        return f"prefixes on the broker: {', '.join(prefixes)}"
    closest = sorted(difflib.get_close_matches(wanted, prefixes, n=MAX_PREFIXES_SHOWN, cutoff=0.0))
    return (f"prefixes on the broker (the {len(closest)} closest to {wanted!r} of {len(prefixes)}): "
            f"{', '.join(closest)}")
