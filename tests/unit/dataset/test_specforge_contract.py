"""Our exports fed to SpecForge's own loader (``specforge.data.prompt_builder``, standard library only).

``make test`` installs it with ``pip install --no-deps specforge==0.2.0`` (its declared
dependencies would pull torch and sglang).
"""

import json

import pyarrow.parquet as pq
import pytest

from eaglefeed.dataset.export import export
from tests.unit.dataset.test_export import make_dataset

prompt_builder = pytest.importorskip(
    "specforge.data.prompt_builder",
    reason="specforge is installed by `make test` (pip install --no-deps specforge==0.2.0)")


def specforge_load(path, max_length):
    tasks = prompt_builder.prepare_prompt_tasks(
        str(path), tokenizer=None, chat_template=None, max_length=max_length, is_preformatted=False,
        train_only_last_turn=False, cache_dir=None, cache_key=None, num_proc=None)
    return [t["payload"] for t in tasks]


def test_specforge_loads_every_row_of_the_export_exactly(tmp_path):
    make_dataset(tmp_path / "d", rows=90)
    export(tmp_path / "d", fmt="specforge", out=tmp_path / "o.jsonl")
    loaded = specforge_load(tmp_path / "o.jsonl", max_length=2048)
    rows = source_rows(tmp_path / "d")
    assert pairs(loaded) == pairs(rows)


def test_our_truncate_summary_predicts_what_specforge_loses(tmp_path):
    make_dataset(tmp_path / "d", rows=90)
    full, cut = tmp_path / "full.jsonl", tmp_path / "cut.jsonl"
    whole = export(tmp_path / "d", fmt="specforge", out=full)
    summary = export(tmp_path / "d", fmt="specforge", out=cut, max_length=30, policy="truncate")
    theirs = specforge_load(full, max_length=30)  # what SpecForge does silently with data.max_length L
    ours = read_jsonl(cut)
    assert pairs(theirs) == pairs(ours)
    assert len(theirs) == whole.rows - summary.cut.dropped_rows
    assert sum(sum(p["loss_mask"]) for p in theirs) == (
        whole.loss_tokens - summary.cut.dropped_loss_tokens - summary.cut.cut_loss_tokens)
    assert len(specforge_load(cut, max_length=30)) == summary.rows  # our cut file loses nothing more


def pairs(rows):
    return [(r["input_ids"], r["loss_mask"]) for r in rows]


def source_rows(root):
    return pq.read_table(root / "segments", columns=["input_ids", "loss_mask"]).to_pylist()


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]
