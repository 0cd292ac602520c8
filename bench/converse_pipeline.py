"""The pipeline delay a regenerated turn adds: generation acknowledged → next prompt acknowledged.

Runs conversations end to end on a fresh local broker, the stand-in (answering at once), one
generate worker, the converse stage and no sink, then pairs every prompt of turn k > 0 with the
generation it continues and reports the delay between their timestamps (the worker stamps the
generation when it builds the record, the converse stage stamps the prompt before sending it):
one poll of the generations topic, the continuation step, and the acknowledged send.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.conversation_step import row
from bench.harness import broker, spawn
from eaglefeed.consumers.converse import run_converse
from eaglefeed.core.config import (
    ConverseConfig,
    KafkaConfig,
    ProducerConfig,
    PromptSettings,
    SamplingDefaults,
)
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.launcher import StandinProcess
from eaglefeed.ops.conversation_status import ConversationFeed
from eaglefeed.producers import run_producer
from eaglefeed.schemas import GENERATION, PROMPT
from tests.integration.worker_support import read_topic


def pipeline_delay(*, conversations: int) -> dict[str, float]:
    """Median and p90 milliseconds from a turn's generation to its next prompt, end to end."""
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="eaglefeed-converse-") as tmp:
        kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=f"b{uuid.uuid4().hex[:8]}")
        standin = StandinProcess(flags=("--latency-model", "none", "--tool-call-fraction", "1",
                                        "--parallel-tool-call-fraction", "0", "--length-fraction", "0"),
                                 log=Path(tmp) / "standin.log").start(wait=False)
        url = standin.url
        stop = StopSignal()
        converse = threading.Thread(target=run_converse, args=(ConverseConfig(kafka=kafka),),
                                    kwargs={"stop": stop}, daemon=True)
        try:
            standin.wait_healthy()
            inputs = Path(tmp) / "conversations.jsonl"
            inputs.write_text("".join(json.dumps(row(i)) + "\n" for i in range(conversations)))
            prompts = PromptSettings(tokenizer=str(TOKENIZER_DIR), history="rerender",
                                     sampling=SamplingDefaults(max_new_tokens=1024))
            run_producer(ProducerConfig(kafka=kafka, inputs=(str(inputs),), partitions=3, prompts=prompts))
            worker = spawn(["generate", "--sglang-url", url, "--bootstrap-servers", bootstrap,
                            "--topic-prefix", kafka.topic_prefix], log=Path(tmp) / "worker.log")
            converse.start()
            _wait_ended(kafka, conversations)
            worker.terminate()
            worker.wait(timeout=60)
        finally:
            stop.set()
            converse.join(timeout=60)
            standin.stop()
        delays = _delays(kafka)
    delays.sort()
    median = statistics.median(delays)
    p90 = delays[int(0.9 * (len(delays) - 1))]
    print(f"pipeline delay per turn: median {median:.0f} ms, p90 {p90:.0f} ms ({len(delays)} turns)")
    return {"converse_turn_delay_ms_p50": median, "converse_turn_delay_ms_p90": p90}


def _wait_ended(kafka: KafkaConfig, conversations: int, timeout: float = 300.0) -> None:
    feed = ConversationFeed(kafka=kafka)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = feed.read()
            if view is not None and view.conversations >= conversations and view.in_progress == 0:
                return
            time.sleep(0.5)
        raise TimeoutError("conversations did not end")
    finally:
        feed.close()


def _delays(kafka: KafkaConfig) -> list[float]:
    made: dict[tuple[str, int, int], int] = {}  # (conversation, lane, turn) -> generation timestamp
    for rec in read_topic(kafka, kafka.generations_topic):
        gen = GENERATION.decode(rec.value)
        state = json.loads(gen["conversation"])
        lane = gen["sample_index"] if state["turn_index"] == 0 else state["lane"]
        made.setdefault((state["conversation_id"], lane, state["turn_index"]), gen["created_at"])
    delays = []
    for rec in read_topic(kafka, kafka.prompts_topic):
        prompt: dict[str, Any] = PROMPT.decode(rec.value)
        state = json.loads(prompt["conversation"])
        if state["turn_index"] > 0:
            before = made.get((state["conversation_id"], state["lane"], state["turn_index"] - 1))
            if before is not None:
                delays.append(float(prompt["created_at"] - before))
    return delays
