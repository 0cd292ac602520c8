"""From `eaglefeed demo`'s dataset to the files the training frameworks load, in `make test`.

SpecForge's JSONL loader (standard library only) runs here; the torch formats and speculators
run in tests/engine/test_frameworks.py (skipped with a reason when .venv-engine is absent).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.cli import run_cli

pytestmark = pytest.mark.kafka
prompt_builder = pytest.importorskip(
    "specforge.data.prompt_builder",
    reason="specforge is installed by `make test` (pip install --no-deps specforge==0.2.0)")


def eaglefeed(*args: str) -> str:
    result = run_cli(*args, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def specforge_load(path: Path, max_length: int) -> list[dict]:
    tasks = prompt_builder.prepare_prompt_tasks(
        str(path), tokenizer=None, chat_template=None, max_length=max_length, is_preformatted=False,
        train_only_last_turn=False, cache_dir=None, cache_key=None, num_proc=None)
    return [t["payload"] for t in tasks]


def test_the_demo_dataset_goes_to_specforge_exactly_and_its_cut_is_reported(tmp_path: Path) -> None:
    demo = tmp_path / "demo-data"
    eaglefeed("demo", "--output", str(demo), "--work-dir", str(tmp_path / "work"))
    rows = pq.read_table(demo / "segments", columns=["input_ids", "loss_mask"]).to_pylist()
    loss_tokens = sum(sum(r["loss_mask"]) for r in rows)

    eaglefeed("export", str(demo), "--format", "specforge", "--out", str(tmp_path / "all.jsonl"))
    loaded = specforge_load(tmp_path / "all.jsonl", max_length=2048)
    assert sorted((p["input_ids"], p["loss_mask"]) for p in loaded) == sorted(
        (r["input_ids"], r["loss_mask"]) for r in rows)

    # SpecForge with data.max_length 256 loses rows and loss tokens silently; our cut says how many
    printed = eaglefeed("export", str(demo), "--format", "specforge", "--out", str(tmp_path / "cut.jsonl"),
                        "--max-length", "256", "--length-policy", "truncate")
    theirs = specforge_load(tmp_path / "all.jsonl", max_length=256)
    ours = [json.loads(line) for line in (tmp_path / "cut.jsonl").read_text().splitlines()]
    assert [(p["input_ids"], p["loss_mask"]) for p in theirs] == [
        (r["input_ids"], r["loss_mask"]) for r in ours]
    kept_loss = sum(sum(p["loss_mask"]) for p in theirs)
    assert f"export: {len(theirs)} rows" in printed and f"({kept_loss} loss tokens)" in printed
    dropped = len(rows) - len(theirs)
    assert f"{dropped} rows dropped" in printed

    # the draft vocabulary from the sink's token counts (numpy files: no torch needed)
    printed = eaglefeed("vocab-map", str(demo), "--format", "speculators", "--draft-vocab-size", "1024",
                        "--target-vocab-size", "4096", "--out", str(tmp_path / "prepared"))
    assert f"{loss_tokens} loss tokens in {len(rows)} rows" in printed and "read again" not in printed
    d2t = np.load(tmp_path / "prepared" / "d2t-1024.npy")
    t2d = np.load(tmp_path / "prepared" / "t2d-1024.npy")
    counts = Counter(i for r in rows for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m)
    chosen = (d2t + np.arange(1024)).tolist()
    assert np.flatnonzero(t2d).tolist() == chosen
    assert sorted(counts[i] for i in chosen) == sorted(counts.values(), reverse=True)[:1024][::-1]
