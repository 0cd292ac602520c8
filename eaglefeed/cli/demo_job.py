"""``eaglefeed demo``: the whole pipeline on embedded defaults, started and stopped here.

Starts a local broker and the SGLang stand-in, publishes the bundled sample prompts, runs one
generate worker and the sink as separate processes until everything is written, prints a
summary of the dataset, and stops what it started. The sample's multi-turn rows are also
regenerated as whole conversations (``--history rerender``, continued by ``eaglefeed converse``):
their rows land in the same dataset, with a ``conversation_id``.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults
from eaglefeed.dataset import live_segments, read_manifest
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.devtools.launcher import StandinProcess, spawn
from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.startup import free_port
from eaglefeed.ops.conversation_status import ConversationFeed, ConversationView


def run_demo(*, output: Path, work_dir: Path, cache_dir: Path) -> int:
    """Run the demo; returns 0 when every sample prompt ended as exactly one training row."""
    from eaglefeed.producers import run_producer

    started = time.monotonic()
    for path in (output, work_dir):
        shutil.rmtree(path, ignore_errors=True)
    work_dir.mkdir(parents=True)
    broker_dir = work_dir / "broker"
    port, standin_port = free_port(), free_port()
    standin = StandinProcess(port=standin_port, flags=("--decode-step-ms", "2"), log=work_dir / "standin.log")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _step(f"starting Kafka {localbroker.KAFKA_VERSION} on 127.0.0.1:{port} (jars cached in {cache_dir})")
        broker = localbroker.start(data_dir=broker_dir, port=port, cache_dir=cache_dir)
        kafka = KafkaConfig(bootstrap_servers=broker.bootstrap_servers or "", topic_prefix="demo")
        _step(f"starting the SGLang stand-in on 127.0.0.1:{standin_port}")
        standin.start()
        _step(f"producing {SAMPLE_PROMPTS.name}")
        summary = run_producer(ProducerConfig(kafka=kafka, inputs=(str(SAMPLE_PROMPTS),),
                                              prompts=_demo_prompts(), partitions=3))
        print(f"    published {summary.published} prompts ({summary.prompt_tokens} prompt tokens),"
              f" dead-lettered {summary.dead_lettered}", flush=True)
        multi = _multi_turn_rows(work_dir / "conversations.jsonl")
        _step(f"producing its {multi} multi-turn rows as whole conversations (--history rerender)")
        conversations = run_producer(ProducerConfig(
            kafka=kafka, inputs=(str(work_dir / "conversations.jsonl"),),
            prompts=_demo_prompts(history="rerender"), partitions=3))
        common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", "demo"]
        _step("running one generate worker, the converse stage and the sink")
        worker = spawn(["generate", "--sglang-url", standin.url, *common], log=work_dir / "worker.log")
        converse = spawn(["converse", *common], log=work_dir / "converse.log")
        sink = spawn(["sink", "--output", str(output), "--flush-seconds", "1", *common],
                     log=work_dir / "sink.log")
        procs += [worker, converse, sink]
        view = _wait_conversations(kafka, conversations.published, [worker, converse, sink], work_dir)
        if view is None or not _wait_rows(output, summary.published + view.turns_done,
                                          [worker, converse, sink], work_dir):
            return 1
        for name, proc in (("worker", worker), ("converse", converse), ("sink", sink)):
            proc.send_signal(signal.SIGTERM)  # a clean stop: flush, commit, exit 0
            if proc.wait(timeout=120) != 0:
                print(f"demo: the {name} failed; see {work_dir}/{name}.log", file=sys.stderr)
                return 1
        ok = _report(output, summary.published + view.turns_done)
        print("    conversations: " + view.lines()[0].split(": ", 1)[1])
        print("\n".join(view.lines()[1:]))
        print(f"done in {time.monotonic() - started:.0f}s; dataset: {output.resolve()}", flush=True)
        return 0 if ok else 1
    finally:
        standin.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        localbroker.stop(broker_dir)


def _demo_prompts(*, history: str = "original") -> PromptSettings:
    """The demo's prompt settings: the bundled demo tokenizer, for the model the stand-in serves."""
    return PromptSettings(tokenizer=str(TOKENIZER_DIR), history=history,
                          sampling=SamplingDefaults(max_new_tokens=1024), model=StandinConfig.model_path)


def _multi_turn_rows(path: Path) -> int:
    """Write the sample's rows with more than one user turn to ``path``; returns how many."""
    rows = [line for line in SAMPLE_PROMPTS.read_text(encoding="utf-8").splitlines()
            if sum(1 for m in json.loads(line).get("messages") or []
                   if isinstance(m, dict) and m.get("role") == "user") > 1]
    path.write_text("".join(line + "\n" for line in rows), encoding="utf-8")
    return len(rows)


def _wait_conversations(kafka: KafkaConfig, conversations: int, procs: list[subprocess.Popen[bytes]],
                        work_dir: Path, timeout: float = 600.0) -> ConversationView | None:
    """Wait until every conversation has ended (read from the conversations topic)."""
    feed = ConversationFeed(kafka=kafka)
    try:
        deadline = time.monotonic() + timeout
        shown = -1
        while time.monotonic() < deadline:
            view = feed.read()
            if view is not None and view.turns_done != shown:
                print(f"    conversation turns done: {view.turns_done}, lanes in progress: "
                      f"{view.in_progress}", flush=True)
                shown = view.turns_done
            if view is not None and view.conversations >= conversations and view.in_progress == 0:
                return view
            if any(proc.poll() not in (None, 0) for proc in procs):
                print(f"demo: a stage failed; see the logs in {work_dir}", file=sys.stderr)
                return None
            time.sleep(1.0)
    finally:
        feed.close()
    print("demo: timed out waiting for the conversations", file=sys.stderr)
    return None


def _wait_rows(output: Path, expected: int, procs: list[subprocess.Popen[bytes]], work_dir: Path,
               timeout: float = 600.0) -> bool:
    """Print progress until the dataset holds ``expected`` rows; False if a process died."""
    deadline = time.monotonic() + timeout
    shown = -1
    while time.monotonic() < deadline:
        events = read_manifest(output)
        rows = sum(seg["rows"] for seg in live_segments(events).values())
        if rows != shown:
            print(f"    rows written: {rows}/{expected}", flush=True)
            shown = rows
        if rows >= expected:
            return True
        for proc in procs:
            if proc.poll() not in (None, 0):
                print(f"demo: a stage failed; see the logs in {work_dir}", file=sys.stderr)
                return False
        time.sleep(1.0)
    print("demo: timed out waiting for the dataset", file=sys.stderr)
    return False


def _report(output: Path, expected: int) -> bool:
    table = pq.read_table(output / "segments")
    rows = table.num_rows
    seq = sum(table.column("seq_len").to_pylist())
    prompt = sum(table.column("prompt_len").to_pylist())
    finish = Counter(table.column("finish_reason").to_pylist())
    reasoning = sum(1 for v in table.column("has_reasoning").to_pylist() if v)
    tools = sum(1 for v in table.column("has_tool_call").to_pylist() if v)
    ids = table.column("id").to_pylist()
    print(f"    rows: {rows} (expected {expected}), unique ids: {len(set(ids))}")
    print(f"    tokens: {seq} ({prompt} prompt, {seq - prompt} generated, mask=1 on generated)")
    print(f"    finish reasons: {dict(finish)}; with reasoning: {reasoning}; with tool calls: {tools}")
    return bool(rows == expected == len(set(ids)))


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)
