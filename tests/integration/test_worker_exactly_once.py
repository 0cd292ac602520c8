"""--exactly-once on Kafka 4.x: a worker killed mid-run and restarted leaves every generation exactly once."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from tests.factories import make_prompt
from tests.integration.worker_support import (
    duplicates,
    generations,
    publish_prompts,
    spawn_worker,
    wait_for_members,
)
from tests.running import wait_until

pytestmark = pytest.mark.kafka


def test_transactions_survive_sigkill_without_duplicates(kafka_config, standin_factory, tmp_path: Path):
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "8", "--output-len-mean", "20",
                          "--output-len-sigma", "0.3")
    prompts = [make_prompt(i, samples=2) for i in range(150)]
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 3))
    # the same --worker-id (so the same transactional id) fences the killed instance at restart
    flags = ["--exactly-once", "--worker-id", "e1", "--concurrency", "16", "--commit-interval", "0.2",
             "--session-timeout", "6"]
    first = spawn_worker(kafka_config, url, tmp_path / "first.log", *flags)
    wait_for_members(kafka_config, 1)
    publish_prompts(kafka_config, prompts, partitions=3)
    wait_until(lambda: len(generations(kafka_config)) >= 60, timeout=60, what="committed generations")
    first.send_signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL

    second = spawn_worker(kafka_config, url, tmp_path / "second.log", *flags)
    expected = {f"{p['prompt_id']}:{i}" for p in prompts for i in range(2)}
    wait_until(lambda: {g["id"] for _r, g in generations(kafka_config)} >= expected, timeout=60,
               what="every sample")
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, (tmp_path / "second.log").read_text()[-3000:]

    ids = [g["id"] for _r, g in generations(kafka_config)]  # read_committed, as the sink reads
    assert set(ids) == expected and duplicates(ids) == 0
    group = KafkaConsumer(bootstrap_servers=kafka_config.bootstrap_servers,
                          group_id=kafka_config.default_group("generate"))
    parts = [TopicPartition(kafka_config.prompts_topic, p) for p in range(3)]
    assert {tp: group.committed(tp) for tp in parts} == group.end_offsets(parts)
    group.close()
