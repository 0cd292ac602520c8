"""Measure how many short prompts per second ``eaglefeed produce`` renders, tokenizes and publishes.

Writes ``--prompts`` short chat prompts (OpenAI and ShareGPT rows, 6-20 words) to a JSONL file,
then, against one Kafka broker (started here unless ``--bootstrap-servers`` is given):

* baseline: a one-prompt-at-a-time loop (parse, ``apply_chat_template(tokenize=True)``, encode,
  send, wait for the broker's ack) over the first ``--baseline-prompts`` prompts;
* the same loop without waiting for each ack (acks collected at the end), for reference;
* ``run_producer`` with each ``--workers`` value (0 renders in the producer process), timed from
  the call to its return (start-up, tokenizer load and the final flush included).

It prints prompts per second, the ratio to the baseline, and CPU time per prompt (producer plus
render processes), and checks that the producer published the very ids the baseline computed.
The machine's load average is printed too: other processes share the cores.

    python -m bench.producer_throughput --prompts 50000 --workers 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from transformers import AutoTokenizer

from eaglefeed.chat.prompts import canonical_json, last_turn, parse_row, prompt_id_from_json
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults, cache_dir
from eaglefeed.core.kafka import ensure_topics, make_producer, pipeline_topics
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.startup import free_port
from eaglefeed.producers import run_producer
from eaglefeed.schemas import PROMPT

WORDS = ("the quick brown fox jumps over a lazy dog what why how when explain list compare write a short "
         "poem about rivers cities numbers planets music history").split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=50000)
    parser.add_argument("--baseline-prompts", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=sorted({0, 1, os.cpu_count() or 1}))
    parser.add_argument("--bootstrap-servers", help="use this broker instead of starting one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inputs = write_prompts(work / "short.jsonl", args.prompts)
        servers, broker_dir = args.bootstrap_servers, None
        if servers is None:
            broker_dir = work / "broker"
            servers = localbroker.start(data_dir=broker_dir, port=free_port(),
                                        cache_dir=cache_dir()).bootstrap_servers
        try:
            bench(inputs, servers or "", args)
        finally:
            if broker_dir is not None:
                localbroker.stop(broker_dir)


def bench(inputs: Path, servers: str, args: argparse.Namespace) -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    lines = inputs.read_bytes().splitlines()[:args.baseline_prompts]
    expected, base_rate = naive(lines, servers, wait_each=True)
    _, nowait_rate = naive(lines, servers, wait_each=False)
    print(f"baseline, one at a time, ack per prompt: {base_rate:8.0f} prompts/s")
    print("RESULT " + json.dumps({"producer_baseline_prompts_per_s": base_rate}))
    print(f"one at a time, acks at the end:          {nowait_rate:8.0f} prompts/s "
          f"({nowait_rate / base_rate:.1f}x)")
    for workers in args.workers:
        kafka = KafkaConfig(bootstrap_servers=servers, topic_prefix=f"bench{uuid.uuid4().hex[:8]}")
        cpu_before = cpu_seconds()
        started = time.perf_counter()
        summary = run_producer(ProducerConfig(kafka=kafka, inputs=(str(inputs),), workers=workers,
                                              partitions=6, prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR))))
        elapsed = time.perf_counter() - started
        cpu = (cpu_seconds() - cpu_before) / summary.published * 1e6
        rate = summary.published / elapsed
        same = published_ids(kafka, set(expected)) == expected
        print(f"run_producer --workers {workers}:              {rate:8.0f} prompts/s "
              f"({rate / base_rate:.1f}x baseline) {summary.published} prompts in {elapsed:.1f}s, "
              f"{cpu:.0f} CPU-us/prompt, "
              f"ids {'identical' if same else 'DIFFERENT'} to the baseline's")
        print("RESULT " + json.dumps({f"producer_w{workers}_prompts_per_s": rate, f"producer_w{workers}_ids_same": same}))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def naive(lines: list[bytes], servers: str, *, wait_each: bool) -> tuple[dict[str, list[int]], float]:
    """The obvious loop; returns prompt_id → input_ids and the rate."""
    kafka = KafkaConfig(bootstrap_servers=servers, topic_prefix=f"naive{uuid.uuid4().hex[:8]}")
    ensure_topics(kafka, pipeline_topics(kafka, 6))
    producer = make_producer(kafka, linger_ms=0)  # nothing to batch when each send waits for its ack
    renderer = PromptRenderer(str(TOKENIZER_DIR), fast=False)
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    sampling = SamplingDefaults().as_params()
    settings = {"sampling": sampling, "template_kwargs": {}, "tokenizer": renderer.tokenizer_hash,
                "template": renderer.chat_template_hash}
    out: dict[str, list[int]] = {}
    futures = []
    started = time.perf_counter()
    for n, line in enumerate(lines, 1):
        conv = parse_row(json.loads(line), default_id=str(n))
        turn = last_turn(conv)
        encoded: Any = tokenizer.apply_chat_template(turn.messages, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)
        ids = list(encoded["input_ids"])
        pid = prompt_id_from_json(turn, tools_json=canonical_json(None), settings_json=canonical_json(settings))
        value = PROMPT.encode({
            "prompt_id": pid, "source": "bench", "source_row": conv.row_id, "turn_index": turn.turn_index,
            "input_ids": ids, "num_samples": 1, "sampling_params": sampling, "chat_template_kwargs": "{}",
            "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": renderer.tokenizer_hash,
            "chat_template_hash": renderer.chat_template_hash, "created_at": int(time.time() * 1000)})
        future = producer.send(kafka.prompts_topic, key=pid.encode(), value=value)
        if wait_each:
            future.get(timeout=30)
        else:
            futures.append(future)
        out[pid] = ids
    for future in futures:
        future.get(timeout=30)
    rate = len(lines) / (time.perf_counter() - started)
    producer.close()
    return out, rate


def published_ids(kafka: KafkaConfig, wanted: set[str]) -> dict[str, list[int]]:
    """prompt_id → input_ids of the published records whose id is in ``wanted``."""
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, enable_auto_commit=False)
    topic = kafka.prompts_topic
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(parts)
    found: dict[str, list[int]] = {}
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        for batch in consumer.poll(timeout_ms=500).values():
            for record in batch:
                if record.key.decode() in wanted:
                    found[record.key.decode()] = PROMPT.decode(record.value)["input_ids"]
    consumer.close()
    return found


def write_prompts(path: Path, count: int) -> Path:
    rng = random.Random(7)
    with open(path, "w") as fh:
        for i in range(count):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))) + "?"
            row = ({"conversations": [{"from": "human", "value": text}]} if i % 4 == 0
                   else {"messages": [{"role": "user", "content": text}]})
            fh.write(json.dumps(row) + "\n")
    return path


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
