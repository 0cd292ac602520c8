"""docs/TRAINING.md's "Stream to a trainer" example runs as written, on CPU, on a small dataset with states.

The only edit: its ``idle_seconds=600`` becomes 1, so the stream ends a second after the last row.
It runs here when torch is installed, else under the engine venv's Python (``.venv-engine``, with
this checkout first on the path), else it is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eaglefeed.dataset.streaming import measure
from tests.unit.dataset.states_support import build

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "docs" / "TRAINING.md"
SECTION = "## Stream to a trainer (`eaglefeed.stream`)"
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"


def example() -> str:
    """The section's python block, the stream's idle time cut to a second."""
    text = TRAINING.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "idle_seconds=600" in code
    return code.replace("idle_seconds=600", "idle_seconds=1")


def _python() -> list[str] | None:
    if importlib.util.find_spec("torch") is not None:
        return [sys.executable]
    if ENGINE_PYTHON.exists():
        return [str(ENGINE_PYTHON)]
    return None


def test_the_streaming_training_loop_trains_on_every_row_checkpoints_and_frees_the_states(tmp_path):
    python = _python()
    if python is None:
        pytest.skip("needs torch (pip install torch) or the engine venv (.venv-engine)")
    build(tmp_path / "DIR", rows=12)
    (tmp_path / "train.py").write_text(example())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*python, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    usage = measure(tmp_path / "DIR")
    assert usage.groups == ("draft",) and usage.stored_files == 0  # keep-tokens: every state consumed, gone
    saved = (tmp_path / "draft.pt").read_bytes()
    assert saved  # a torch checkpoint holding the model, the optimizer and the position
    again = subprocess.run([*python, "-c", "import torch; s = torch.load('draft.pt', weights_only=False); "
                            "print(s['data']['epoch'], sorted(s))"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.stdout.split()[0] == "1", again.stderr[-2000:]  # the epoch ended: a resume starts the next
