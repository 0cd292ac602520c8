"""Shared set-up of the generate-worker benchmarks: broker, stand-in, synthetic prompts, metrics."""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from kafka import KafkaProducer

from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.launcher import StandinProcess
from eaglefeed.devtools.startup import free_port
from eaglefeed.schemas import PROMPT


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """Use ``bootstrap`` or start a throw-away local broker."""
    if bootstrap:
        yield bootstrap
        return
    data = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    status = localbroker.start(data_dir=data, port=free_port(), cache_dir=cache_dir())
    try:
        yield status.bootstrap_servers or ""
    finally:
        localbroker.stop(data)


@contextlib.contextmanager
def standin(*flags: str) -> Iterator[str]:
    """One SGLang stand-in with ``flags`` (output discarded); yields its base URL."""
    with StandinProcess(flags=flags) as server:
        yield server.url


def prompt(i: int, *, max_new_tokens: int, length: int = 200,
           sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """Synthetic prompt ``i``: ``length`` random ids, seeded; ``sampling`` replaces sampling params."""
    rng = random.Random(i)
    return {
        "prompt_id": hashlib.sha256(f"bench{i}".encode()).hexdigest()[:24], "source": "bench",
        "source_row": str(i), "turn_index": 0, "input_ids": [rng.randrange(9, 4096) for _ in range(length)],
        "num_samples": 1,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.7, "top_p": 0.95,
                            "top_k": 20, "min_p": 0.0, "stop_token_ids": [], "seed": i, **(sampling or {})},
        "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": "t",
        "chat_template_hash": "c", "created_at": int(time.time() * 1000),
    }


def fresh_topics(bootstrap: str, count: int, *, max_new_tokens: int, partitions: int = 6,
                 length: int = 200, sampling: dict[str, Any] | None = None) -> KafkaConfig:
    """A new topic prefix holding ``count`` prompts of ``length`` ids (``sampling``: see :func:`prompt`)."""
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(kafka, pipeline_topics(kafka, partitions))
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type="zstd")
    for i in range(count):
        value = PROMPT.encode(prompt(i, max_new_tokens=max_new_tokens, length=length, sampling=sampling))
        producer.send(kafka.prompts_topic, key=b"%d" % i, value=value)
    producer.flush()
    producer.close()
    return kafka


def busy_counters(url: str) -> tuple[float, float, float]:
    """(monotonic time, running_request_seconds_total, max_running_requests) from the stand-in."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    now = time.monotonic()
    return now, _sample(text, "eaglefeed_standin_running_request_seconds_total"), \
        _sample(text, "eaglefeed_standin_max_running_requests")


def _sample(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)", text, re.M)
    if found is None:
        raise RuntimeError(f"the stand-in's /metrics has no {name}")
    return float(found.group(1))


def busy_fraction(before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
    return (after[1] - before[1]) / ((after[0] - before[0]) * after[2])


def worker_cmd(kafka: KafkaConfig, url: str, *flags: str) -> list[str]:
    """The command of a worker in a group of its own (no stale members from an earlier run)."""
    return [sys.executable, "-m", "eaglefeed", "--log-level", "warning", "generate", "--sglang-url", url,
            "--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topic_prefix,
            "--group-id", f"{kafka.topic_prefix}-generate", *flags]
