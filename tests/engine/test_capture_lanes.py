"""A tokens conversation lane with capture on a real vLLM: linear bytes, one row equal to transformers.

Each turn's prompt is the previous turn's prompt + output + a suffix, so storing every turn's full
span would store the history again and again. The worker keeps for each turn only the positions
past what the lane's earlier turns hold; ``load(..., lanes=True)`` joins them into one row of the
final turn's ids, whose states must equal transformers' forward on those ids (the lane as a whole,
written to one file and checked by ``tests/engine/hidden_reference.py``). ``export --hidden-states
--lanes`` writes the same rows, which speculators' own reader gives back equal to ``load``'s.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import eaglefeed
from eaglefeed.core.config import KafkaConfig, SamplingDefaults
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.state_files import write as store_write
from tests.engine.conftest import ENGINE_PYTHON, CaptureServer
from tests.engine.test_frameworks import run
from tests.engine.test_state_exports import loaders
from tests.integration.conversation_support import Pipeline
from tests.integration.test_conversations import chat_row, write_rows

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
LAYERS = (1, 3, 4)
STOPS = (2, *range(8, 4096, 8))  # <|im_end|> and one id in eight: short turns that end with stop


def test_a_three_turn_tokens_lane_stores_each_position_once_and_joins_to_transformers_states(
        capture_vllm: Callable[..., CaptureServer], tiny_model_4_dir: Path, kafka_config: KafkaConfig,
        tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    store = out / hidden_states.STORE
    server = capture_vllm(layer_ids=LAYERS, dtype="float32", store_dir=store)
    rows = [chat_row(i) for i in range(4)]
    inputs = write_rows(tmp_path / "conversations.jsonl", rows)
    pipeline = Pipeline(kafka_config, server.url, out, tmp_path)
    try:
        pipeline.start_worker("--engine", "vllm", "--hidden-states", ",".join(map(str, LAYERS)),
                              "--hidden-states-dir", str(store))
        pipeline.produce(inputs, mode="tokens", samples=1, sampling=SamplingDefaults(
            max_new_tokens=48, temperature=1.0, top_p=1.0, top_k=-1, seed=7, stop_token_ids=STOPS))
        view = pipeline.wait_ended(lanes=len(rows), timeout=300)
        pipeline.wait_rows(view.turns_done, timeout=120)
    finally:
        pipeline.close()

    lanes = [lane for lane in eaglefeed.load(out, hidden_states=True, lanes=True) if lane["turns"] == 3]
    assert len(lanes) >= 3, view
    per_position = len(LAYERS) * 128 * 4  # hidden 128, fp32
    checks = []
    for lane in lanes:
        states = lane["hidden_states"]
        positions = len(lane["input_ids"]) - 1
        assert states.shape == (positions, len(LAYERS), 128)
        stored = sum((out / ref.uri).stat().st_size for ref in states.refs)
        assert stored <= 1.05 * positions * per_position, (stored, positions * per_position)
        whole = tmp_path / f"lane-{lane['id'].replace(':', '-')}.safetensors"
        store_write.write_file(whole, states=states.float32(), token_ids=lane["input_ids"][:-1],
                                 layer_ids=LAYERS, num_hidden_layers=4)
        checks.append(whole)
        mask = lane["loss_mask"]
        spans = sum(1 for i, bit in enumerate(mask) if bit and (i == 0 or not mask[i - 1]))
        assert spans == 3, mask  # each turn's generated ids, and only those

    lines = "".join(json.dumps({"path": str(path)}) + "\n" for path in checks)
    result = subprocess.run([str(ENGINE_PYTHON), str(HERE / "hidden_reference.py"), str(tiny_model_4_dir)],
                            input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    worst = max(diff["max_abs"] for line in result.stdout.splitlines() if line.strip()
                for diff in json.loads(line)["layers"].values())
    print(f"\n{len(lanes)} three-turn lanes: joined states vs transformers, max abs {worst:.2e}")
    assert worst <= 1e-5

    train = tmp_path / "train" / "data.jsonl"
    train.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(out), "--format", "speculators", "--out", str(train),
                   "--hidden-states", "--lanes", "--skip-missing-states"]).stdout
    assert "lanes of several turns, joined" in printed, printed
    result = loaders("--lanes", "speculators", str(out), str(train.parent))
    assert sum(check.pop("turns") == 3 for check in result["checks"]) == len(lanes)
    for check in result["checks"]:  # speculators' ArrowDataset + FileTransfer: every tensor ours
        assert check == {"ids": True, "loss_mask": True, "aux": True, "last": True, "dtype": "torch.float32",
                         "lengths": True}
