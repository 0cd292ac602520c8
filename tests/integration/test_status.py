"""Lag measured by eaglefeed itself, and the ``eaglefeed status`` screen, on the real broker."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry, generate_latest

from eaglefeed.core.kafka import ensure_topics, make_producer, pipeline_topics
from eaglefeed.core.lag import LagProbe, LagReporter
from eaglefeed.core.metrics import LagMetrics
from tests.cli import kafka_flags, run_cli

pytestmark = pytest.mark.kafka


def test_lag_follows_commits_and_status_prints_it(kafka_config, tmp_path):
    group = kafka_config.default_group("generate")  # what `status` reads unless told otherwise
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 2))
    producer = make_producer(kafka_config)
    for i in range(30):
        producer.send(kafka_config.prompts_topic, key=str(i).encode(), value=b"x", partition=i % 2)
    producer.flush()
    producer.close()
    probe = LagProbe(kafka=kafka_config)
    try:
        before = probe.measure(group, kafka_config.prompts_topic)
        assert [(p.partition, p.committed, p.end, p.lag) for p in before] == [(0, 0, 15, 15), (1, 0, 15, 15)]
        consumer = KafkaConsumer(bootstrap_servers=kafka_config.bootstrap_servers,
                                 group_id=group, enable_auto_commit=False)
        consumer.commit({TopicPartition(kafka_config.prompts_topic, 0): OffsetAndMetadata(10, "", -1)})
        consumer.close()
        after = probe.measure(group, kafka_config.prompts_topic)
        assert [p.lag for p in after] == [5, 15]
    finally:
        probe.close()

    registry = CollectorRegistry()
    reporter = LagReporter(kafka=kafka_config, stage="generate", group=group,
                           topic=kafka_config.prompts_topic, metrics=LagMetrics.create(registry),
                           interval=0.2).start()
    try:
        import time

        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline and "eaglefeed_consumer_lag_records{" not in text:
            time.sleep(0.2)
            text = generate_latest(registry).decode()
        series = f'partition="1",stage="generate",topic="{kafka_config.prompts_topic}"'
        assert f"eaglefeed_consumer_lag_records{{{series}}} 15.0" in text
    finally:
        reporter.stop()

    out = run_cli("status", "--once", "--interval", "0.2", *kafka_flags(kafka_config),
                  "--output", str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    generate_line = next(line for line in out.stdout.splitlines() if line.startswith("generate"))
    # done, in flight (no worker reports), waiting, total
    assert generate_line.split()[1:6] == [kafka_config.prompts_topic, "10", "-", "20", "30"]
    assert "dead letters: 0" in out.stdout and "dataset: 0 rows" in out.stdout


def test_status_on_an_unknown_prefix_lists_the_prefixes_and_fails(kafka_config):
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 1))
    out = run_cli("status", "--once", "--interval", "0.1",
                  "--bootstrap-servers", kafka_config.bootstrap_servers, "--topic-prefix", "typo",
                  timeout=120)
    assert out.returncode == 1, out.stdout
    assert "--topic-prefix 'typo'" in out.stderr and kafka_config.topic_prefix in out.stderr
    assert "Traceback" not in out.stderr and not out.stdout
