"""``run_producer`` on the in-memory Kafka: its topics created, its prompts and dead letters published."""

from __future__ import annotations

import json
from pathlib import Path

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers import run_producer
from tests.fakes.kafka import FakeKafka

KAFKA = KafkaConfig(topic_prefix="t")


def test_a_run_creates_the_pipeline_topics_and_publishes_each_prompt_once(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    rows = [{"id": n, "messages": [{"role": "user", "content": f"question {n}"}]} for n in range(3)]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n{oops\n")
    fake = FakeKafka()
    cfg = ProducerConfig(kafka=KAFKA, inputs=(str(path),), partitions=2,
                         prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR)))
    summary = run_producer(cfg, clients=fake)
    assert summary.published == 3 and summary.dead_lettered == 1
    assert fake.partitions[KAFKA.prompts_topic] == 2 and fake.partitions[KAFKA.dead_letter_topic] == 1
    assert len(fake.read(KAFKA.prompts_topic)) == 3 and len(fake.read(KAFKA.dead_letter_topic)) == 1
    assert KAFKA.redriven_topic not in fake.partitions  # no fix marker was due: the topic is not made
    assert all(producer.closed for producer in fake.producers)

