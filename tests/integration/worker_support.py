"""Helpers of the generate-worker integration tests: synthetic prompts, topic reads, worker processes."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.schemas import DEAD_LETTER, GENERATION, PROMPT
from tests.cli import kafka_flags, start_cli
from tests.running import wait_until


def publish(kafka: KafkaConfig, values: list[bytes], *, partitions: int = 6) -> dict[tuple[int, int], bytes]:
    """Create the topics and spread ``values`` round-robin; returns (partition, offset) → value."""
    ensure_topics(kafka, pipeline_topics(kafka, partitions))
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    futures = [(producer.send(kafka.prompts_topic, key=b"k%d" % i, value=v, partition=i % partitions), v)
               for i, v in enumerate(values)]
    placed = {}
    for fut, value in futures:
        md = fut.get(timeout=30)
        placed[(md.partition, md.offset)] = value
    producer.close()
    return placed


def publish_prompts(kafka: KafkaConfig, prompts: list[dict[str, Any]],
                    **kw: Any) -> dict[tuple[int, int], bytes]:
    return publish(kafka, [PROMPT.encode(p) for p in prompts], **kw)


def read_topic(kafka: KafkaConfig, topic: str) -> list[Any]:
    """Every committed record of ``topic`` (read_committed), in partition order."""
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or [])]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(parts)
    records: list[Any] = []
    deadline = time.monotonic() + 30
    while any(consumer.position(tp) < ends[tp] for tp in parts) and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            records.extend(batch)
    consumer.close()
    return records


def generations(kafka: KafkaConfig) -> list[tuple[Any, dict[str, Any]]]:
    return [(r, GENERATION.decode(r.value)) for r in read_topic(kafka, kafka.generations_topic)]


def dead_letters(kafka: KafkaConfig) -> list[dict[str, Any]]:
    return [DEAD_LETTER.decode(r.value) for r in read_topic(kafka, kafka.dead_letter_topic)]


def count_generations(kafka: KafkaConfig) -> int:
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    parts = [TopicPartition(kafka.generations_topic, p)
             for p in (consumer.partitions_for_topic(kafka.generations_topic) or [])]
    total = sum(consumer.end_offsets(parts).values()) if parts else 0
    consumer.close()
    return total


def wait_for_members(kafka: KafkaConfig, count: int, group: str | None = None,
                     timeout: float = 60) -> None:
    """Wait until ``group`` (default: the workers') is stable with ``count`` members, each owning one."""
    group = group or kafka.default_group("generate")
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    seen: list[str] = ["nothing yet"]

    def ready() -> bool:
        try:
            info = admin.describe_groups([group])[group]
        except KafkaError as exc:  # no coordinator yet
            seen[0] = repr(exc)
            return False
        owned = []
        for member in info["members"]:
            assignment = member["member_assignment"] or {"assigned_partitions": []}
            owned.append(sum(len(a["partitions"]) for a in assignment["assigned_partitions"]))
        seen[0] = f"state {info['group_state']}, partitions per member {owned}"
        return info["group_state"] == "Stable" and len(owned) == count and min(owned) > 0

    try:
        wait_until(ready, timeout=timeout, what=f"{count} members with partitions in {group}")
    except AssertionError as exc:
        raise AssertionError(f"{exc} (last seen: {seen[0]})") from None
    finally:
        admin.close()


def duplicates(ids: list[str]) -> int:
    return sum(n - 1 for n in Counter(ids).values())


def spawn_worker(kafka: KafkaConfig, url: str, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """``eaglefeed generate`` as a child process, its output in ``log``."""
    return start_cli("--log-level", "info", "generate", "--sglang-url", url, *kafka_flags(kafka), *flags,
                     log=log)
