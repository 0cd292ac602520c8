"""Write raw garbage straight into the pipeline's topics, noting where each record landed."""

from __future__ import annotations

import random
from typing import Any

from kafka import KafkaProducer

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.schemas import PROMPT
from reliability import inputs
from reliability.ledger import Expected


def inject_garbage(kafka: KafkaConfig, expected: Expected, *, prompts: int, generations: int, seed: int,
                   partitions: int) -> None:
    """Send ``prompts`` garbage prompt records and ``generations`` garbage generation records.

    Each lands on a random partition; ``expected`` learns its topic, partition and offset (and the
    ``prompt_id`` of a well-formed prompt), so its dead letter or row can be found.
    """
    rng = random.Random(seed)
    batches = [(kafka.prompts_topic, inputs.garbage_prompts(seed, prompts)),
               (kafka.generations_topic, inputs.garbage_generations(seed, generations))]
    if not prompts and not generations:
        return
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all",
                             max_request_size=4 * 1024 * 1024)
    try:
        for topic, values in batches:
            sent = [(producer.send(topic, key=b"garbage-%d" % i, value=value,
                                   partition=rng.randrange(partitions)), value)
                    for i, value in enumerate(values)]
            for future, value in sent:
                meta = future.get(timeout=30)
                prompt_id = _prompt_id(value) if topic == kafka.prompts_topic else None
                expected.add_injected(topic, meta.partition, meta.offset, prompt_id)
    finally:
        producer.close()


def _prompt_id(value: Any) -> str | None:
    try:
        return str(PROMPT.decode(value)["prompt_id"])
    except SchemaError:
        return None
