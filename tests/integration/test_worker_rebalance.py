"""A fourth worker joins a group of three on six partitions: work moves, nothing unfinished is committed."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from kafka import KafkaConsumer, TopicPartition

from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.schemas.done_offsets import decode_done
from tests.factories import make_prompt
from tests.integration.worker_support import (
    count_generations,
    duplicates,
    generations,
    publish_prompts,
    wait_for_members,
)
from tests.running import WorkerThread, wait_until

pytestmark = pytest.mark.kafka


@pytest.fixture
def commits(monkeypatch):
    """Every offset commit any in-process consumer makes: (wall-clock ms just before it, offsets, how)."""
    seen: list[tuple[int, dict, str]] = []
    lock = threading.Lock()
    for name in ("commit", "commit_async"):
        original = getattr(KafkaConsumer, name)

        def recording(self, offsets=None, *args, _original=original, _name=name, **kwargs):
            with lock:
                seen.append((int(time.time() * 1000), dict(offsets or {}), _name))
            return _original(self, offsets, *args, **kwargs)

        monkeypatch.setattr(KafkaConsumer, name, recording)
    return seen


def test_a_joining_worker_takes_partitions_and_nothing_unfinished_is_committed(
        kafka_config, standin_factory, commits):
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "5", "--output-len-mean", "30",
                          "--output-len-sigma", "0.3", "--max-running-requests", "64")
    prompts = [make_prompt(i) for i in range(360)]
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 6))

    def worker(name: str) -> WorkerThread:
        return WorkerThread(WorkerConfig(kafka=kafka_config, sglang_urls=(url,), worker_id=name,
                                         concurrency=6, commit_interval=0.1))

    first = [worker(f"w{i}") for i in range(3)]
    wait_for_members(kafka_config, 3)
    placed = publish_prompts(kafka_config, prompts[:300], partitions=6)
    wait_until(lambda: count_generations(kafka_config) >= 60, timeout=60,
               what="the first three workers to make progress")
    fourth = worker("w3")  # joins while the others have work in flight
    wait_for_members(kafka_config, 4)
    placed.update(publish_prompts(kafka_config, prompts[300:], partitions=6))
    expected = {f"{p['prompt_id']}:0" for p in prompts}
    wait_until(lambda: {g["id"] for _r, g in generations(kafka_config)} >= expected, timeout=60,
               what="every prompt")
    for w in [*first, fourth]:
        w.stop.set()
    for w in [*first, fourth]:
        w.join(timeout=60)

    gens = generations(kafka_config)
    ids = [g["id"] for _r, g in gens]
    assert set(ids) == expected
    assert duplicates(ids) <= 12  # work in flight on the partitions that moved (2 members × 6)
    assert {g["worker_id"] for _r, g in gens} == {"w0", "w1", "w2", "w3"}  # all shared the work

    # When each commit was made, every offset it covers (below it, or listed done in its metadata)
    # had all of its results published already.
    published = defaultdict(lambda: 1 << 62)
    for rec, g in gens:
        published[g["prompt_id"]] = min(published[g["prompt_id"]], rec.timestamp)
    prompt_at = {(p, o): prompt_id_of(v) for (p, o), v in placed.items()}
    assert len(commits) > 20
    for when, offsets, _how in commits:
        for tp, om in offsets.items():
            covered = set(range(om.offset)) | decode_done(om.offset, om.metadata)
            for offset in covered:
                assert published[prompt_at[(tp.partition, offset)]] <= when, (tp, offset, om)

    group = KafkaConsumer(bootstrap_servers=kafka_config.bootstrap_servers,
                          group_id=kafka_config.default_group("generate"))
    parts = [TopicPartition(kafka_config.prompts_topic, p) for p in range(6)]
    assert {tp: group.committed(tp) for tp in parts} == group.end_offsets(parts)
    group.close()


def prompt_id_of(value: bytes) -> str:
    from eaglefeed.schemas import PROMPT

    return PROMPT.decode(value)["prompt_id"]
