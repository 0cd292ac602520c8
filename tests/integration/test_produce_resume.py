"""Resume by default: Ctrl-C of ``produce``, the same command again, and no prompt published twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli, start_cli
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka
ROWS = 20000


def end_offset(kafka: KafkaConfig, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        parts = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or [])]
        return sum(consumer.end_offsets(parts).values()) if parts else 0
    finally:
        consumer.close()


def test_ctrl_c_then_the_same_command_publishes_every_prompt_once(kafka_config, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
                            for i in range(ROWS)))
    argv = ["produce", str(path), "--workers", "0", "--partitions", "2", *kafka_flags(kafka_config)]
    # No flag: the ledger's default place is produce/ in the cache dir (here one of the test's
    # own), whatever the working directory; the tokenizer comes from its variable.
    env = {k: v for k, v in os.environ.items()
           if k not in ("EAGLEFEED_STATE_DIR", "EAGLEFEED_PRODUCER_STATE_DIR", "EAGLEFEED_PRODUCE_STATE_DIR")}
    env["EAGLEFEED_PRODUCE_TOKENIZER"] = str(TOKENIZER_DIR)
    env["EAGLEFEED_CACHE_DIR"] = str(tmp_path / "cache")
    first = start_cli(*argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while end_offset(kafka_config, kafka_config.prompts_topic) < 1000:
        assert first.poll() is None and time.monotonic() < deadline, "produce ended before it was interrupted"
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 130, err.decode()  # interrupted: not every input was read
    interrupted = end_offset(kafka_config, kafka_config.prompts_topic)
    assert 0 < interrupted < ROWS, "the run was not interrupted mid-file"
    assert b"run the same command again to resume" in err

    second = run_cli(*argv, env=env, cwd="/", text=False, timeout=600)  # any directory
    assert second.returncode == 0, second.stderr.decode()
    assert b"resuming from" in second.stderr
    records = read_topic(kafka_config, kafka_config.prompts_topic)
    keys = [r.key for r in records]
    # Each published prompt is one generation: the second run re-publishes nothing the first
    # had published (a stop reads on to the next ledger mark, so nothing is in flight).
    assert len(keys) == len(set(keys)) == ROWS

    third = run_cli(*argv, "--restart", env=env, cwd=tmp_path, text=False, timeout=600)
    assert third.returncode == 0 and f"published {ROWS} prompts".encode() in third.stdout


def test_a_restarted_worker_does_not_generate_prompts_published_again(kafka_config, standin_factory):
    from eaglefeed.consumers.generate import run_worker
    from eaglefeed.core.config import WorkerConfig
    from eaglefeed.schemas import PROMPT
    from tests.factories import make_prompt
    from tests.integration.worker_support import count_generations, publish

    prompts = [make_prompt(i, samples=2, max_new_tokens=8) for i in range(40)]
    values = [PROMPT.encode(p) for p in prompts]
    url = standin_factory()
    cfg = WorkerConfig(kafka=kafka_config, sglang_urls=(url,), concurrency=8, exit_when_idle=3,
                       commit_interval=0.2, check_vocab=False)
    publish(kafka_config, values, partitions=2)
    assert run_worker(cfg) == 40
    assert count_generations(kafka_config) == 80
    publish(kafka_config, values, partitions=2)  # a producer killed before its checkpoint, run again
    assert run_worker(cfg) == 40  # ... finished by a fresh worker process without a request
    assert count_generations(kafka_config) == 80


def test_kill_9_then_the_same_command_costs_at_most_the_in_flight_window(kafka_config, standin_factory,
                                                                          tmp_path):
    from eaglefeed.consumers.generate import run_worker
    from eaglefeed.core.config import WorkerConfig
    from tests.integration.worker_support import count_generations

    rows = 3000
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q {i}"}]}) + "\n"
                            for i in range(rows)))
    argv = ["produce", str(path), "--workers", "0", "--partitions", "2", "--max-new-tokens", "4",
            *kafka_flags(kafka_config), "--tokenizer", str(TOKENIZER_DIR)]
    env = {**os.environ, "EAGLEFEED_CACHE_DIR": str(tmp_path / "cache")}  # the default ledger's home
    first = start_cli(*argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while end_offset(kafka_config, kafka_config.prompts_topic) < 300:
        assert first.poll() is None and time.monotonic() < deadline, "produce ended before it was killed"
        time.sleep(0.05)
    first.kill()  # SIGKILL: no checkpoint on the way out
    first.wait(timeout=30)
    assert run_cli(*argv, cwd=tmp_path, env=env, text=False, timeout=600).returncode == 0
    published = end_offset(kafka_config, kafka_config.prompts_topic)
    # the rows since the last checkpoint are published again (none when the kill came right after
    # one: seen once on a machine at load 14) ...
    assert published >= rows
    concurrency = 32
    cfg = WorkerConfig(kafka=kafka_config, sglang_urls=(standin_factory(),), concurrency=concurrency,
                       exit_when_idle=3, commit_interval=0.2, check_vocab=False)
    assert run_worker(cfg) == published
    # ... but cost at most the in-flight window in generations (2 × concurrency dispatched)
    assert rows <= count_generations(kafka_config) <= rows + 2 * concurrency
