"""Exports with --max-length: exact counts of what each policy drops or cuts, checked against the rows."""

import json
import logging
import random

import pyarrow.parquet as pq
import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.export import export
from eaglefeed.schemas.columnar import GenerationBatch
from tests.unit.dataset.test_export import gen, make_dataset

L = 30


def source_rows(root):
    return pq.read_table(root / "segments", columns=["id", "input_ids", "loss_mask", "prompt_len",
                                                     "seq_len"]).to_pylist()


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_drop_leaves_out_exactly_the_long_rows(tmp_path):
    make_dataset(tmp_path / "d", rows=90)
    rows = source_rows(tmp_path / "d")
    long = [r for r in rows if r["seq_len"] > L]
    assert 10 < len(long) < 80
    summary = export(tmp_path / "d", fmt="specforge", out=tmp_path / "o.jsonl", max_length=L, policy="drop")
    written = read_jsonl(tmp_path / "o.jsonl")
    assert [w["id"] for w in written] == [r["id"] for r in rows if r["seq_len"] <= L]
    cut = summary.cut
    assert cut.over == cut.dropped_rows == len(long) and cut.truncated_rows == 0
    assert cut.dropped_tokens == sum(r["seq_len"] for r in long)
    assert cut.dropped_loss_tokens == sum(sum(r["loss_mask"]) for r in long)
    assert summary.rows == len(written) and summary.loss_tokens == sum(sum(w["loss_mask"]) for w in written)


def test_truncate_keeps_the_mask_aligned_and_drops_rows_left_without_loss_tokens(tmp_path):
    make_dataset(tmp_path / "d", rows=90)
    rows = source_rows(tmp_path / "d")
    summary = export(tmp_path / "d", fmt="speculators", out=tmp_path / "o.jsonl", max_length=L,
                     policy="truncate")
    written = {w["id"]: w for w in read_jsonl(tmp_path / "o.jsonl")}
    emptied = [r for r in rows if r["prompt_len"] >= L and r["seq_len"] > L]
    cut_rows = [r for r in rows if r["prompt_len"] < L < r["seq_len"]]
    assert emptied and cut_rows
    for r in rows:
        if r in emptied:
            assert r["id"] not in written
            continue
        w = written[r["id"]]
        assert w["input_ids"] == r["input_ids"][:L] and w["loss_mask"] == r["loss_mask"][:L]
        assert w["seq_len"] == len(w["input_ids"]) and sum(w["loss_mask"]) >= 1
    cut = summary.cut
    assert cut.over == len(emptied) + len(cut_rows)
    assert cut.dropped_rows == len(emptied)
    assert cut.dropped_loss_tokens == sum(sum(r["loss_mask"]) for r in emptied)
    assert cut.truncated_rows == len(cut_rows)
    assert cut.cut_tokens == sum(r["seq_len"] - L for r in cut_rows)
    assert cut.cut_loss_tokens == sum(sum(r["loss_mask"][L:]) for r in cut_rows)
    assert summary.loss_tokens + cut.dropped_loss_tokens + cut.cut_loss_tokens == sum(
        sum(r["loss_mask"]) for r in rows)


def test_error_writes_nothing_and_names_the_rows(tmp_path, caplog):
    make_dataset(tmp_path / "d", rows=30)
    over = sum(1 for r in source_rows(tmp_path / "d") if r["seq_len"] > L)
    with pytest.raises(DatasetError, match=f"{over} rows are longer than --max-length {L}"):
        export(tmp_path / "d", fmt="specforge", out=tmp_path / "o.jsonl", max_length=L, policy="error")
    assert not list(tmp_path.glob("*.jsonl")) and not list(tmp_path.glob(".*.tmp"))
    assert main(["export", str(tmp_path / "d"), "--format", "specforge", "--out", str(tmp_path / "o.jsonl"),
                 "--max-length", str(L), "--length-policy", "error"]) == 1
    assert "nothing written" in caplog.text


def test_max_length_without_a_policy_is_refused(tmp_path, caplog):
    make_dataset(tmp_path / "d", rows=3)
    assert main(["export", str(tmp_path / "d"), "--format", "specforge", "--out", str(tmp_path / "o.jsonl"),
                 "--max-length", "8"]) == 1
    assert "--max-length needs --length-policy" in caplog.text


def long_dataset(root):
    """Rows around SpecForge's default 2048: short, cut, and left with no loss token."""
    rng = random.Random(3)
    sizes = [(100, 50), (2000, 100), (2100, 10), (10, 20), (2040, 8)]
    recs = [gen(i, rng, p, o) for i, (p, o) in enumerate(sizes)]
    table = shards.batch_to_table(GenerationBatch.from_records(recs))
    entry = shards.write_segment(root, "seg.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 0]}})


def test_rows_over_the_framework_default_are_warned_about_with_exact_counts(tmp_path, caplog, capsys):
    long_dataset(tmp_path / "d")
    with caplog.at_level(logging.WARNING):
        assert main(["export", str(tmp_path / "d"), "--format", "specforge", "--out",
                     str(tmp_path / "o.jsonl")]) == 0
    # 2000+100 is cut by 52 loss tokens; 2100+10 keeps none (10 lost); 2040+8 fits exactly
    assert ("2 rows are longer than specforge's default data.max_length 2048: it will truncate them, "
            "cutting 52 loss tokens, and silently drop the 1 rows left with no loss token (10 loss tokens)"
            ) in caplog.text
    assert len(read_jsonl(tmp_path / "o.jsonl")) == 5  # nothing changed without a policy
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out",
                     str(tmp_path / "p.jsonl")]) == 0
    assert "longer than" not in caplog.text  # 8192 is not reached
    # a policy without --max-length applies the format's default
    assert main(["export", str(tmp_path / "d"), "--format", "specforge", "--out", str(tmp_path / "q.jsonl"),
                 "--length-policy", "truncate"]) == 0
    assert ("max length 2048 (truncate): 2 rows longer; 1 rows dropped (2110 tokens, 10 loss tokens), 1 rows "
            "truncated (52 tokens cut, 52 of them loss tokens)") in capsys.readouterr().out
    assert len(read_jsonl(tmp_path / "q.jsonl")) == 4
