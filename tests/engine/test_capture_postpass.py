"""``eaglefeed capture`` on a real capture-enabled vLLM: rows made without states get transformers' ones.

A dataset is written through the sink from records without states (as a run before capture, or
on SGLang, leaves it); ``eaglefeed capture DIR --sglang-url URL`` (the CLI, as a user runs it) sends
each row's ``input_ids[:-1]`` as a prefill-only request and replaces the dataset's files with rows
that reference their files. Each file is checked against transformers' own fp32 forward pass on
the row's ``input_ids[:-1]`` (``tests/engine/hidden_reference.py``); a second run sends nothing.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import eaglefeed
from eaglefeed.consumers.sink.loop import run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.dataset import hidden_states, state_fill
from eaglefeed.dataset.hidden_states import check_file
from eaglefeed.schemas import GENERATION
from tests.engine.conftest import ENGINE_PYTHON, CaptureServer
from tests.factories import generation_record
from tests.fakes.kafka import FakeKafka

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFIGURED = (4, 1, 3)
FP32_TOLERANCE = 1e-5
KAFKA = KafkaConfig(topic_prefix="postpass")


def _records() -> list[dict[str, Any]]:
    """16 rows of mixed lengths (block edges, up to ~1,400 ids), three sharing a long prefix."""
    rng = random.Random(7)
    lengths = [(2, 1), (14, 3), (15, 2), (120, 9), (126, 3), (250, 8), (509, 4), (700, 30), (1000, 25),
               (1390, 10), (64, 64), (3, 200), (40, 1)]
    pairs = [([rng.randrange(10, 4000) for _ in range(p)], [rng.randrange(10, 4000) for _ in range(o)])
             for p, o in lengths]
    prefix = [rng.randrange(10, 4000) for _ in range(600)]
    pairs += [(prefix + [rng.randrange(10, 4000) for _ in range(k)],
               [rng.randrange(10, 4000) for _ in range(5)]) for k in (3, 50, 200)]
    return [generation_record(id=f"r{i}:0", prompt_id=f"r{i}", prompt_ids=prompt, output_ids=output,
                              finish_reason="length", matched_stop=None, source_row=str(i))
            for i, (prompt, output) in enumerate(pairs)]


def _dataset(root: Path, records: list[dict[str, Any]]) -> None:
    """The records as a dataset through the sink, in three runs (three files)."""
    kafka = FakeKafka()
    kafka.create_topic(KAFKA.generations_topic, partitions=1)
    kafka.create_topic(KAFKA.dead_letter_topic)
    for part in (records[:6], records[6:11], records[11:]):
        for rec in part:
            kafka.append(KAFKA.generations_topic, GENERATION.encode(rec), key=rec["id"].encode(), partition=0)
        run_sink(SinkConfig(kafka=KAFKA, output=root, exit_when_idle=0.1, flush_seconds=0.05), clients=kafka)


def _capture_cli(root: Path, url: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "eaglefeed", "capture", str(root), "--sglang-url", url,
           "--hidden-states", ",".join(map(str, CONFIGURED)), "--hidden-states-dtype", "float32",
           "--concurrency", "6", "--progress-seconds", "2"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)


def _reference(model_dir: Path, files: list[Path]) -> list[dict[str, Any]]:
    lines = "".join(json.dumps({"path": str(f)}) + "\n" for f in files)
    result = subprocess.run([str(ENGINE_PYTHON), str(HERE / "hidden_reference.py"), str(model_dir)],
                            input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"hidden_reference.py failed:\n{result.stderr[-4000:]}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _sorted(table: Any) -> Any:
    return table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))


def test_capture_adds_transformers_states_to_a_dataset_made_without_them(
        capture_vllm: Callable[..., CaptureServer], tiny_model_4_dir: Path, tmp_path: Path,
        record_property: Callable[[str, object], None]) -> None:
    root = tmp_path / "dataset"
    records = _records()
    _dataset(root, records)
    before = _sorted(eaglefeed.load(root))
    assert before.column("hidden_states").null_count == len(records)
    server = capture_vllm(layer_ids=CONFIGURED, dtype="float32", store_dir=root / hidden_states.STORE)

    done = _capture_cli(root, server.url)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert f"{len(records)} of {len(records)} rows without states now have them" in summary, done.stdout
    assert " 0 failed" in summary

    after = _sorted(eaglefeed.load(root))
    assert after.drop_columns(["hidden_states"]).equals(before.drop_columns(["hidden_states"]))
    files = []
    for row in eaglefeed.load(root, hidden_states=True):
        ref = row["hidden_states"].ref
        assert ref.uri == f"{hidden_states.STORE}/{state_fill.final_name(row['id'])}"
        assert ref.shape[0] == row["seq_len"] - 1 and ref.layer_ids == tuple(sorted(CONFIGURED))
        assert hidden_states.problem(root, ref) is None
        check_file(root / ref.uri, token_ids=row["input_ids"][:-1], layer_ids=CONFIGURED, dtype="float32")
        files.append(root / ref.uri)
    assert len(set(files)) == len(records)

    worst: dict[str, float] = {}
    for report in _reference(tiny_model_4_dir, files):
        for layer, diff in report["layers"].items():
            worst[layer] = max(worst.get(layer, 0.0), diff["max_abs"])
    record_property("postpass_max_abs_by_layer", json.dumps(worst))
    print(f"\ncapture postpass vs transformers, max abs diff by layer over {len(files)} rows: {worst}")
    assert set(worst) == {"1", "3", "4"} and max(worst.values()) <= FP32_TOLERANCE

    again = _capture_cli(root, server.url)  # everything referenced: nothing to send, nothing rewritten
    assert again.returncode == 0, again.stdout + again.stderr[-4000:]
    assert "0 of 0 rows without states" in again.stdout and "in 0 requests" in again.stdout
