"""scripts/prompt_path.py keeps measuring: a prompt crosses every stage, and the path does not grow back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_MODULES = 47  # distinct non-core modules on the path: 44 after issue 33 (50 before it), then
# dataset.store.mirror (the commit asks whether the dataset lives in an object store),
# schemas.done_offsets (the commit metadata codec, shared with `status`) and
# consumers.generate.inference.models (the worker checks the server's model) in issues 35 and 36


def test_the_path_is_measured_and_stays_short():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "prompt_path.py"), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out)
    assert "eaglefeed.producers.publisher" in result["produce"]
    assert "eaglefeed.consumers.generate.loop" in result["generate"]
    assert "eaglefeed.consumers.sink.loop" in result["sink"]
    assert "eaglefeed.dataset.shards" in result["sink"]  # the row reached a Parquet shard
    distinct = {module for stage in ("produce", "generate", "sink") for module in result[stage]}
    assert len(distinct) <= MOST_MODULES, sorted(distinct)
