"""A remote-code tokenizer of Kimi-K2's shape, end to end on the real broker and the stand-in.

The tokenizer is written by the tests (tests/remote_tokenizer.py: a tiktoken vocabulary, its class
in a .py file named in auto_map, no tokenizer.json). With --trust-remote-code every prompt is the
tokenizer's own apply_chat_template and rows land; without it each stage stops with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, TopicPartition
from transformers import AutoTokenizer

from eaglefeed.chat.prompts import last_turn, parse_row
from eaglefeed.consumers.converse import ConverseSummary, run_converse
from eaglefeed.consumers.generate import run_worker
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import (
    ConverseConfig,
    KafkaConfig,
    ProducerConfig,
    PromptSettings,
    SamplingDefaults,
    SinkConfig,
    WorkerConfig,
)
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.core.tokenizer.remote_code import RemoteCodeError
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.devtools.demo import SAMPLE_PROMPTS
from eaglefeed.producers import run_producer
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import count_generations, read_topic

pytestmark = pytest.mark.kafka
ROWS = 40


def test_with_the_flag_every_prompt_is_the_tokenizers_own_and_rows_land(kafka_config, standin_factory,
                                                                         remote_tokenizer, tmp_path):
    lines = SAMPLE_PROMPTS.read_text().splitlines()[:ROWS]
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(lines) + "\n")
    url = standin_factory("--tokenizer", str(remote_tokenizer), "--trust-remote-code",
                          "--latency-model", "none", "--think-fraction", "0.5")
    out, stop = tmp_path / "dataset", StopSignal()
    sink = threading.Thread(target=run_sink, args=(SinkConfig(kafka=kafka_config, output=out,
                                                              flush_seconds=0.5),), kwargs={"stop": stop})
    sink.start()
    summary = run_producer(ProducerConfig(  # one render process: the setting travels to it
        kafka=kafka_config, inputs=(str(inputs),), partitions=3, workers=1, prompts=PromptSettings(
            tokenizer=str(remote_tokenizer), samples=2, trust_remote_code=True,
            sampling=SamplingDefaults(max_new_tokens=128))))
    assert summary.published == ROWS and summary.dead_lettered == 0, summary.describe()

    worker = WorkerConfig(kafka=kafka_config, sglang_urls=(url,), concurrency=16, exit_when_idle=6)
    with pytest.raises(RemoteCodeError, match="pass --trust-remote-code"):  # its vocabulary check
        run_worker(worker)
    assert count_generations(kafka_config) == 0  # stopped before the prompt: nothing published
    assert run_worker(WorkerConfig(**{**worker.__dict__, "trust_remote_code": True})) == ROWS
    _wait_for_rows(out, 2 * ROWS, sink)
    stop.set()
    sink.join(timeout=60)

    tok = AutoTokenizer.from_pretrained(str(remote_tokenizer), trust_remote_code=True)  # not eaglefeed's
    expected = {}
    for line in lines:
        conv = parse_row(json.loads(line), default_id="?")
        expected[conv.row_id] = tok.apply_chat_template(
            last_turn(conv).messages, tools=conv.tools, add_generation_prompt=True, tokenize=True,
            return_dict=True, **conv.template_kwargs)["input_ids"]
    rows = pq.read_table(out / "segments").to_pylist()
    assert len(rows) == 2 * ROWS and len({r["id"] for r in rows}) == 2 * ROWS
    for row in rows:
        ids, n = row["input_ids"], row["prompt_len"]
        assert ids[:n] == expected[row["source_row"]]  # token-exact: the tokenizer's own template
        assert row["loss_mask"] == [0] * n + [1] * (len(ids) - n) and len(ids) > n
        assert max(ids) < len(tok)
    assert {r["tokenizer_id"] for r in rows} == {str(remote_tokenizer)}
    assert len({r["tokenizer_hash"] for r in rows}) == 1
    assert any(r["has_reasoning"] for r in rows)  # think markers read from added_tokens_decoder
    assert all(r["has_reasoning"] is not None for r in rows)


def test_without_the_flag_produce_stops_with_one_line_and_publishes_nothing(kafka_config, remote_tokenizer,
                                                                            tmp_path):
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(SAMPLE_PROMPTS.read_text().splitlines()[:5]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    command = ["produce", str(inputs), "--tokenizer", str(remote_tokenizer), *kafka_flags(kafka_config),
               "--state-dir", str(tmp_path / "state")]
    for workers in ("0", "2"):
        done = run_cli(*command, "--workers", workers, timeout=120, env=env, stdin=subprocess.DEVNULL)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert "runs its own Python code" in lines[0] and "pass --trust-remote-code" in lines[0]
        assert _published(kafka_config) == 0
    done = run_cli(*command, timeout=120, stdin=subprocess.DEVNULL,
                   env={**env, "EAGLEFEED_TRUST_REMOTE_CODE": "1"})
    assert done.returncode == 0, done.stderr
    assert _published(kafka_config) == len(read_topic(kafka_config, kafka_config.prompts_topic)) == 5


def _published(kafka: KafkaConfig) -> int:
    """Records on the prompts topic (0 when it does not exist)."""
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        topic = kafka.prompts_topic
        parts = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or [])]
        return sum(consumer.end_offsets(parts).values()) if parts else 0
    finally:
        consumer.close()


def _wait_for_rows(out: Path, expected: int, sink: threading.Thread) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and sink.is_alive():
        if (out / "manifest.jsonl").exists() and \
                sum(s["rows"] for s in live_segments(read_manifest(out)).values()) >= expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {expected} rows in {out}")


@pytest.mark.parametrize("mode", ["rerender"])  # tokens: lanes end early on this template (issue 23)
def test_conversations_continue_with_the_flag(mode, kafka_config, standin_factory, remote_tokenizer,
                                              tmp_path):
    """produce → generate → converse → sink: every lane runs to the end of its source, complete."""
    rows = [{"id": f"chat-{i}", "messages": [
        {"role": "user", "content": f"Name a prime above {10 * i}."},
        {"role": "assistant", "content": "31.", "reasoning_content": "Check small primes."},
        {"role": "user", "content": "Why is it prime?"},
        {"role": "assistant", "content": "No divisor up to its square root."},
        {"role": "user", "content": "Give another one."}]} for i in range(3)]
    inputs = tmp_path / "chats.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    url = standin_factory("--tokenizer", str(remote_tokenizer), "--trust-remote-code",
                          "--latency-model", "none", "--think-fraction", "0.5", "--length-fraction", "0",
                          "--output-len-mean", "24")
    out, stop = tmp_path / "dataset", StopSignal()
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 3))
    sink = threading.Thread(target=run_sink, args=(SinkConfig(kafka=kafka_config, output=out,
                                                              flush_seconds=0.3),), kwargs={"stop": stop})
    summaries: dict[str, ConverseSummary] = {}
    converse = threading.Thread(target=lambda: summaries.update(c=run_converse(ConverseConfig(
        kafka=kafka_config, trust_remote_code=True, exit_when_idle=8))))
    worker = threading.Thread(target=run_worker, args=(WorkerConfig(
        kafka=kafka_config, sglang_urls=(url,), concurrency=8, exit_when_idle=8, commit_interval=0.2,
        trust_remote_code=True),))
    for thread in (sink, converse, worker):
        thread.start()
    try:
        summary = run_producer(ProducerConfig(
            kafka=kafka_config, inputs=(str(inputs),), partitions=3, prompts=PromptSettings(
                tokenizer=str(remote_tokenizer), samples=2, history=mode, trust_remote_code=True)))
        assert summary.published == 3, summary.describe()  # each conversation's first prompt
        converse.join(timeout=180)
        worker.join(timeout=60)
        assert not converse.is_alive() and not worker.is_alive()
        ended = summaries["c"].ended
        _wait_for_rows(out, 3 * 6, sink)  # 3 turns of 2 lanes of 3 conversations
    finally:
        stop.set()
        sink.join(timeout=60)
    got = pq.read_table(out / "segments").to_pylist()
    lanes: dict[tuple[str, int], list[dict]] = {}
    for row in sorted(got, key=lambda r: r["turn_index"]):
        lanes.setdefault((row["conversation_id"], row["lane"]), []).append(row)
    assert sum(ended.values()) == 6 and all(k.startswith("complete") for k in ended), ended
    assert len(lanes) == 6 and all(len(turns) == 3 for turns in lanes.values()), ended
    tok = AutoTokenizer.from_pretrained(str(remote_tokenizer), trust_remote_code=True)
    first = tok.apply_chat_template(rows[0]["messages"][:1], add_generation_prompt=True, tokenize=True,
                                    return_dict=True)["input_ids"]
    assert any(t[0]["input_ids"][:t[0]["prompt_len"]] == first for t in lanes.values())
    if mode == "tokens":
        for turns in lanes.values():
            for before, after in zip(turns, turns[1:], strict=False):
                assert after["input_ids"][:before["seq_len"]] == before["input_ids"]  # an exact extension
