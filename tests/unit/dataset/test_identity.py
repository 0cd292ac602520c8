"""A dataset has one identity: ``stats``, ``export`` and ``vocab-map`` refuse rows of two tokenizers,
chat templates or models unless given ``--allow-mixed``, naming each with its row count."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset import compute_stats, export, manifest, render, shards, snapshot, snapshot_counts
from eaglefeed.dataset.identity import Identity, identities
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.schemas.columnar import GenerationBatch

QWEN, DEMO = "a" * 64, "b" * 64


def gen(i: int, *, tokenizer: str = "Qwen/Qwen3-8B", tok_hash: str = QWEN, template: str = "c" * 64,
        model: str = "Qwen/Qwen3-8B") -> dict:
    return {
        "id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [9, 9], "output_ids": [8, 2],
        "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 2, "completion_tokens": 2,
        "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e", "model_path": model,
        "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i), "turn_index": 0,
        "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": tokenizer, "tokenizer_hash": tok_hash,
        "chat_template_hash": template, "prompt_created_at": 1, "created_at": 2,
    }


def dataset(root: Path, *files: list[dict]) -> Path:
    for n, recs in enumerate(files):
        markers = {r["tokenizer_id"]: FlagMarkers() for r in recs}
        table = shards.batch_to_table(GenerationBatch.from_records(recs), markers)
        entry = shards.write_segment(root, f"{n}.parquet", table)
        offsets = {f"g:{n}": [0, len(recs)]}
        manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": offsets})
    return root


def two_tokenizers(root: Path) -> Path:
    qwen = [gen(i) for i in range(6)]
    demo = [gen(i, tokenizer="demo", tok_hash=DEMO, template="d" * 64, model="") for i in range(6, 8)]
    return dataset(root, qwen[:4], qwen[4:] + demo)  # the second file holds both: rows are counted


def test_rows_are_counted_per_identity(tmp_path):
    root = two_tokenizers(tmp_path / "d")
    with snapshot(root) as files:
        counts = identities(files)
    assert counts == {Identity("Qwen/Qwen3-8B", QWEN, "c" * 64, "Qwen/Qwen3-8B"): 6,
                      Identity("demo", DEMO, "d" * 64, ""): 2}


def test_the_readers_refuse_a_mixed_dataset_naming_each_identity_and_its_rows(tmp_path):
    root = two_tokenizers(tmp_path / "d")
    line = ("the dataset mixes 2 tokenizers (and chat templates): Qwen/Qwen3-8B (tokenizer aaaaaaaaaaaa…, "
            "template cccccccccccc…, model Qwen/Qwen3-8B) 6 rows, demo (tokenizer bbbbbbbbbbbb…, template "
            "dddddddddddd…) 2 rows; pass --allow-mixed to read it anyway")
    for read in (lambda: compute_stats(root), lambda: snapshot_counts(root),
                 lambda: export(root, fmt="specforge", out=tmp_path / "out.jsonl")):
        with pytest.raises(DatasetError) as refused:
            read()
        assert str(refused.value) == line
    assert not (tmp_path / "out.jsonl").exists()
    stats = compute_stats(root, allow_mixed=True)
    assert stats.rows == 8
    assert f"WARNING: {line.partition(';')[0]}" in render(stats).splitlines()  # what it read, per identity
    assert [(m["tokenizer_id"], m["rows"]) for m in stats.as_dict()["made_with"]] == [("Qwen/Qwen3-8B", 6),
                                                                                      ("demo", 2)]
    assert snapshot_counts(root, allow_mixed=True).rows == 8
    assert export(root, fmt="specforge", out=tmp_path / "out.jsonl", allow_mixed=True).rows == 8


def test_a_second_chat_template_or_model_is_a_mix_but_an_unnamed_model_is_not(tmp_path):
    template = dataset(tmp_path / "t", [gen(0), gen(1, template="e" * 64)])
    with pytest.raises(DatasetError, match=r"^the dataset mixes 2 chat templates: "):
        compute_stats(template)
    model = dataset(tmp_path / "m", [gen(0), gen(1, model="other/model"), gen(2, model="other/model")])
    with pytest.raises(DatasetError, match=r"^the dataset mixes 2 models: .*other/model\) 2 rows, "):
        compute_stats(model)
    unnamed = dataset(tmp_path / "u", [gen(0), gen(1, model="")])  # a server that did not say its model
    assert compute_stats(unnamed).rows == 2


def test_the_cli_refuses_in_one_line_and_reads_with_allow_mixed(tmp_path, caplog, capsys):
    root = two_tokenizers(tmp_path / "d")
    out = tmp_path / "vocab"
    commands = (["stats", str(root)],
                ["export", str(root), "--format", "speculators", "--out", str(tmp_path / "x")],
                ["vocab-map", str(root), "--format", "speculators", "--draft-vocab-size", "2",
                 "--target-vocab-size", "16", "--out", str(out)])
    for argv in commands:
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            assert main(argv) == 1
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith("the dataset mixes 2 tokenizers"), errors
        assert errors[0].endswith("demo (tokenizer bbbbbbbbbbbb…, template dddddddddddd…) 2 rows; "
                                  "pass --allow-mixed to read it anyway")
        assert main([*argv, "--allow-mixed"]) == 0
    assert "rows: 8 in 2 files" in capsys.readouterr().out
