"""The producer on the real broker: exact, stable records; dead letters; follow and resume; the CLI."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry
from transformers import AutoTokenizer

from eaglefeed.cli.main import main
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers import run_producer
from eaglefeed.schemas import DEAD_LETTER, PROMPT
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
HISTORY = [{"role": "user", "content": "Capital of France?"},
           {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."},
           {"role": "user", "content": "And of Japan?"}]
TOOL_TURN = [{"role": "user", "content": "Weather in Oslo?"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
             {"role": "tool", "content": "sunny"}]
# row → (expected messages, tools, template kwargs); the CLI default kwargs are {}
GOOD_ROWS = [
    ({"id": "multi", "messages": [*HISTORY, {"role": "assistant", "content": "Tokyo."}]}, HISTORY, None, {}),
    ({"id": "multi-nothink", "messages": HISTORY, "chat_template_kwargs": {"enable_thinking": False}},
     HISTORY, None, {"enable_thinking": False}),
    ({"id": "tools", "tools": TOOLS, "messages": [
        TOOL_TURN[0], {**TOOL_TURN[1], "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}, TOOL_TURN[2]]}, TOOL_TURN, TOOLS, {}),
    ({"id": "sg-multi", "conversations": [{"from": "human", "value": "Capital of France?"},
                                          {"from": "gpt", "value": "Paris."},
                                          {"from": "human", "value": "And of Japan?"}]},
     [HISTORY[0], {"role": "assistant", "content": "Paris."}, HISTORY[2]], None, {}),
    ({"id": "sg-tools", "tools": json.dumps(TOOLS), "chat_template_kwargs": {"enable_thinking": False},
      "conversations": [{"from": "human", "value": "Weather in Oslo?"},
                        {"from": "function_call",
                         "value": '{"name": "get_weather", "arguments": {"city": "Oslo"}}'},
                        {"from": "observation", "value": "sunny"}]},
     TOOL_TURN, TOOLS, {"enable_thinking": False}),
]
BAD_LINES = [b"{oops", b'{"messages": [{"role": "user", "content": "\xff"}]}', b'{"messages": []}',
             b'{"messages": [{"role": "ghost", "content": "x"}]}',
             b'{"messages": [{"role": "system", "content": "s"}]}',
             b'{"messages": [{"role": "user", "content": "' + b"long " * 300 + b'"}]}', b'"a string"']
BAD_REASONS = ["invalid_json", "invalid_utf8", "empty_conversation", "unknown_role", "no_user_turn",
               "prompt_too_long", "wrong_type"]


def config(kafka: KafkaConfig, inputs: list[Path], **kw: Any) -> ProducerConfig:
    return ProducerConfig(kafka=kafka, inputs=tuple(str(p) for p in inputs), partitions=2,
                          prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR), max_prompt_tokens=600), **kw)


def test_records_are_exact_and_stable_and_bad_lines_are_dead_lettered(kafka_config, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps(row).encode() for row, *_ in GOOD_ROWS]
    (folder / "a.jsonl").write_bytes(b"\n".join([*lines, *BAD_LINES, lines[0]]) + b"\n")  # last: a duplicate
    (folder / "b.json").write_text(json.dumps([GOOD_ROWS[0][0]]))  # a duplicate too, from an array
    parquet_rows = pa.table({"messages": [[{"role": "user", "content": "from parquet"}]]})
    pq.write_table(parquet_rows, folder / "c.parquet")

    first = run_producer(config(kafka_config, [folder]))
    assert (first.rows, first.published, first.dead_lettered) == (len(GOOD_ROWS) + len(BAD_LINES) + 3, 6, 7)
    assert first.skipped_by_reason == {"duplicate": 2}
    assert first.bad_by_reason == {reason: 1 for reason in BAD_REASONS}

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    records = {PROMPT.decode(r.value)["source_row"]: (r.key, PROMPT.decode(r.value))
               for r in read_topic(kafka_config, kafka_config.prompts_topic)}
    assert len(records) == 6
    for row, messages, tools, kwargs in GOOD_ROWS:
        key, record = records[row["id"]]
        expected = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True, **kwargs)["input_ids"]
        assert record["input_ids"] == list(expected), row["id"]
        assert key == record["prompt_id"].encode() and record["source"].endswith("a.jsonl")
    letters = [DEAD_LETTER.decode(r.value) for r in read_topic(kafka_config, kafka_config.dead_letter_topic)]
    assert sorted((d["line"], d["error_kind"]) for d in letters) == [
        (len(GOOD_ROWS) + i, reason) for i, reason in enumerate(BAD_REASONS, 1)]
    assert all(d["stage"] == "produce" and d["source"].endswith("a.jsonl") and d["value"] for d in letters)

    # Again, rendered in a render process this time: the very same ids.
    second = run_producer(config(kafka_config, [folder], workers=1))
    assert (second.published, second.dead_lettered) == (first.published, first.dead_lettered)
    again = [(r.key, PROMPT.decode(r.value)) for r in read_topic(kafka_config, kafka_config.prompts_topic)]
    assert len(again) == 12
    assert {(k, tuple(v["input_ids"])) for k, v in again} == {
        (k, tuple(v["input_ids"])) for k, v in records.values()}


def published(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("eaglefeed_producer_prompts_published_total") or 0.0


def run_following(cfg: ProducerConfig) -> tuple[threading.Thread, StopSignal, CollectorRegistry]:
    stop, registry = StopSignal(), CollectorRegistry()
    thread = threading.Thread(target=run_producer, args=(cfg,), kwargs={"registry": registry, "stop": stop})
    thread.start()
    return thread, stop, registry


def wait_for(registry: CollectorRegistry, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while published(registry) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert published(registry) == count


def row(i: int) -> str:
    return json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"


def test_follow_publishes_new_lines_and_files_and_resumes_after_a_restart(kafka_config, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text(row(1) + row(2))
    cfg = config(kafka_config, [folder], follow=True, state_dir=tmp_path / "state", poll_interval=0.05,
                 settle_seconds=0.2)
    thread, stop, registry = run_following(cfg)
    wait_for(registry, 2)
    with open(folder / "a.jsonl", "a") as fh:
        fh.write(row(3))
    (folder / "b.jsonl").write_text(row(4))
    wait_for(registry, 4)
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()

    with open(folder / "a.jsonl", "a") as fh:
        fh.write(row(5))
    thread, stop, registry = run_following(cfg)
    wait_for(registry, 1)
    time.sleep(0.3)  # a few more rounds: nothing else may be published
    stop.set()
    thread.join(timeout=30)
    assert published(registry) == 1
    records = [PROMPT.decode(r.value) for r in read_topic(kafka_config, kafka_config.prompts_topic)]
    assert sorted((Path(r["source"]).name, r["source_row"]) for r in records) == [
        ("a.jsonl", "1"), ("a.jsonl", "2"), ("a.jsonl", "3"), ("a.jsonl", "4"), ("b.jsonl", "1")]


def test_cli_strict_exit_code_summary_and_skip_done(kafka_config, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(StopSignal, "install", lambda self: self)
    path = tmp_path / "p.jsonl"
    path.write_text(row(1) + row(2) + "{bad\n")
    argv = ["produce", str(path), "--bootstrap-servers", kafka_config.bootstrap_servers, "--topic-prefix",
            kafka_config.topic_prefix, "--workers", "0", "--partitions", "1",
            "--state-dir", str(tmp_path / "st"), "--tokenizer", str(TOKENIZER_DIR)]
    assert main([*argv, "--strict"]) == 2
    assert "published 2 prompts" in capsys.readouterr().out
    ids = [PROMPT.decode(r.value)["prompt_id"] for r in read_topic(kafka_config, kafka_config.prompts_topic)]
    dataset = tmp_path / "ds"
    (dataset / "segments").mkdir(parents=True)
    done = pa.table({"id": [f"{ids[0]}:0"], "prompt_id": [ids[0]]})
    pq.write_table(done, dataset / "segments" / "s.parquet")
    (dataset / "manifest.jsonl").write_text(json.dumps({"added": [{"path": "segments/s.parquet"}]}) + "\n")
    assert main([*argv, "--skip-done", str(dataset), "--restart"]) == 0  # the first run is done
    out = capsys.readouterr().out
    assert "published 1 prompts" in out and "skipped 1 (done=1)" in out
