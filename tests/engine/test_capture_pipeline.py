"""The pipeline with ``--hidden-states`` on a real capture-enabled vLLM: each row holds transformers' states.

Producer records → Kafka → generate worker (capture on, layers configured out of order) → Kafka →
sink → Parquet rows referencing ``hidden_states/`` files. Each file is checked against an
independent reference: transformers' own forward pass on the row's ``input_ids[:-1]`` (prompt +
output[:-1]) for every configured layer (``tests/engine/hidden_reference.py``), and the greedy
outputs against transformers' ``generate`` (so capture did not change what was generated).
"""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eaglefeed
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.config import KafkaConfig
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import HiddenStatesRef, check_file
from tests.engine.conftest import ENGINE_PYTHON, CaptureServer, run_greedy_reference
from tests.engine.pipeline_support import Pipeline, prompt_record, reference_requests

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
CONFIGURED = (4, 1, 3)  # out of order on purpose: files hold layers ascending
FP32_TOLERANCE = 1e-5


def _prompts() -> list[dict[str, Any]]:
    """18 greedy prompts of mixed lengths across block edges, four sharing a long prefix, two repeated."""
    rng = random.Random(34)
    lengths = [3, 15, 16, 17, 64, 100, 255, 257, 511, 700, 1000, 1400]
    ids = [[rng.randrange(10, 4000) for _ in range(n)] for n in lengths]
    prefix = [rng.randrange(10, 4000) for _ in range(600)]
    ids += [prefix + [rng.randrange(10, 4000) for _ in range(k)] for k in (5, 40, 130, 333)]
    ids += [ids[9], ids[9]]  # the same prompt twice more: the prefix cache serves it whole
    return [prompt_record(i, prompt, max_new_tokens=12) for i, prompt in enumerate(ids)]


def _reference(model_dir: Path, files: list[Path]) -> list[dict[str, Any]]:
    lines = "".join(json.dumps({"path": str(f), "configured": list(CONFIGURED)}) + "\n" for f in files)
    result = subprocess.run([str(ENGINE_PYTHON), str(HERE / "hidden_reference.py"), str(model_dir)],
                            input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"hidden_reference.py failed:\n{result.stderr[-4000:]}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_every_row_holds_transformers_states_of_its_prompt_and_output(
        capture_vllm: Callable[..., CaptureServer], tiny_model_4_dir: Path, kafka_config: KafkaConfig,
        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    server = capture_vllm(layer_ids=CONFIGURED, dtype="float32",
                                  flags=("--enable-prompt-tokens-details",))
    out = tmp_path / "dataset"
    out.mkdir()
    (out / hidden_states.STORE).symlink_to(server.store_dir)  # the server's folder is the dataset's store
    prompts = _prompts()
    capture = CaptureSettings(store=server.store_dir, layers=CONFIGURED, dtype="float32")
    pipeline = Pipeline(kafka_config, (server.url,), out, capture=capture, engine="vllm", concurrency=18)
    outcome = pipeline.run(prompts, rows=len(prompts))
    assert not outcome.dead, outcome.dead
    rows = outcome.rows
    assert sorted(r["id"] for r in rows) == sorted(f"{p['prompt_id']}:0" for p in prompts)

    files = []
    for row in rows:
        ref = HiddenStatesRef.from_record(row["hidden_states"])
        assert ref.layer_ids == tuple(sorted(CONFIGURED)) and ref.dtype == "float32"
        assert ref.shape[0] == row["seq_len"] - 1 and ref.last_layer == "before_final_norm"
        assert hidden_states.problem(out, ref) is None
        # the file's ids are the row's prompt + output[:-1], checked here again from the row itself
        check_file(out / ref.uri, token_ids=row["input_ids"][:-1], layer_ids=CONFIGURED, dtype="float32")
        files.append(out / ref.uri)
    assert sum(r["cached_tokens"] for r in rows) >= 600, "no row hit the prefix cache"

    worst: dict[str, float] = {}
    for report in _reference(tiny_model_4_dir, files):
        for layer, diff in report["layers"].items():
            worst[layer] = max(worst.get(layer, 0.0), diff["max_abs"])
        assert report["max_abs_configured_order"] > FP32_TOLERANCE  # the order matters, and was honoured
    record_property("capture_max_abs_by_layer", json.dumps(worst))
    print(f"\ncapture vs transformers, max abs diff by layer over {len(files)} rows: {worst}")
    assert set(worst) == {"1", "3", "4"} and max(worst.values()) <= FP32_TOLERANCE

    expected = run_greedy_reference(tiny_model_4_dir, reference_requests(prompts))
    assert outcome.outputs() == expected, "capture changed what was generated"

    loaded = eaglefeed.load(out, hidden_states=True)
    first = loaded[0]
    raw = first["hidden_states"].raw
    assert isinstance(raw, np.memmap) and raw.shape == tuple(first["hidden_states"].shape)
