"""The happy path on the real broker and the SGLang stand-in: prompts in, exact training rows out."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eaglefeed.chat.prompts import last_turn, parse_row
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.consumers.generate import run_worker
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import ProducerConfig, PromptSettings, SamplingDefaults, SinkConfig, WorkerConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.producers import run_producer

pytestmark = pytest.mark.kafka


def test_prompts_become_exact_training_rows(kafka_config, standin_factory, tmp_path: Path):
    lines = SAMPLE_PROMPTS.read_text().splitlines()[:40]
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(lines) + "\n")
    url = standin_factory("--latency-model", "none", "--think-fraction", "0.5")
    out = tmp_path / "dataset"
    worker = threading.Thread(target=run_worker, args=(WorkerConfig(
        kafka=kafka_config, sglang_urls=(url,), concurrency=16, exit_when_idle=8),))
    worker.start()  # before the producer: stages wait for their topics to be created
    stop = StopSignal()
    sink_result = {}
    sink = threading.Thread(target=lambda: sink_result.update(s=run_sink(SinkConfig(
        kafka=kafka_config, output=out, flush_seconds=0.5), stop=stop)))
    sink.start()
    time.sleep(1)
    summary = run_producer(ProducerConfig(
        kafka=kafka_config, inputs=(str(inputs),), partitions=3, prompts=PromptSettings(
            tokenizer=str(TOKENIZER_DIR), samples=2, sampling=SamplingDefaults(max_new_tokens=256))))
    assert summary.published == 40 and summary.dead_lettered == 0

    worker.join(timeout=120)
    assert not worker.is_alive()
    _wait_for_rows(out, 80, sink)
    stop.set()
    sink.join(timeout=60)
    assert sink_result["s"].rows_written == 80

    table = pq.read_table(out / "segments")
    rows = table.to_pylist()
    assert len(rows) == 80 and len({r["id"] for r in rows}) == 80
    renderer = PromptRenderer(str(TOKENIZER_DIR))
    by_row = {}
    for line in lines:
        conv = parse_row(json.loads(line), default_id="?")
        kwargs = conv.template_kwargs
        by_row[conv.row_id] = renderer.render(last_turn(conv).messages, tools=conv.tools,
                                              template_kwargs=kwargs)
    for row in rows:
        ids, mask, n = row["input_ids"], row["loss_mask"], row["prompt_len"]
        assert len(ids) == len(mask) == row["seq_len"]
        assert mask == [0] * n + [1] * (len(ids) - n)
        assert ids[:n] == by_row[row["source_row"]]  # exactly what the producer tokenized
        assert row["completion_tokens"] == len(ids) - n > 0
        if row["finish_reason"] == "stop":
            assert ids[-1] == int(row["matched_stop"])
    samples = {}
    for row in rows:
        samples.setdefault(row["prompt_id"], set()).add(row["sample_index"])
    assert all(s == {0, 1} for s in samples.values())
    # Two samples of one prompt use different seeds, so they differ.
    by_prompt = {}
    for row in rows:
        by_prompt.setdefault(row["prompt_id"], []).append(row["input_ids"])
    assert sum(1 for a, b in by_prompt.values() if a != b) > 30
    assert any(r["has_reasoning"] for r in rows)
    assert {r["model_path"] for r in rows} == {"eaglefeed/standin-demo"}


def _wait_for_rows(out: Path, expected: int, sink: threading.Thread) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sink.is_alive():
        if sum(s["rows"] for s in live_segments(read_manifest(out)).values()) >= expected:
            return
        time.sleep(0.2)
