"""Exports checked against the rules SpecForge's and speculators' loaders apply to pre-tokenized JSONL."""

import json
import random
import tracemalloc

import pyarrow.parquet as pq
import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.export import export
from eaglefeed.schemas.columnar import GenerationBatch
from tests.factories import generation_record


def gen(i, rng, prompt_len, output_len):
    return generation_record(id=f"r{i}", prompt_id=f"p{i}",
                             prompt_ids=[rng.randrange(151_000) for _ in range(prompt_len)],
                             output_ids=[rng.randrange(151_000) for _ in range(output_len)],
                             matched_stop=None, source_row=str(i))


def make_dataset(root, rows, segments=3, seed=0, max_len=40):
    rng = random.Random(seed)
    per = rows // segments
    for s in range(segments):
        recs = [gen(s * per + k, rng, rng.randint(1, max_len), rng.randint(1, max_len)) for k in range(per)]
        table = shards.batch_to_table(GenerationBatch.from_records(recs))
        entry = shards.write_segment(root, f"seg-{s}.parquet", table)
        manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [s, s]}})


def specforge_rows(path):
    """SpecForge data.prompts_path: JSONL or a JSON array, stdlib json; pre-tokenized when the first
    record has both keys; each row 1-D integer lists of equal length, a 0/1 mask, at least one loss token."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines()]
    assert {"input_ids", "loss_mask"} <= rows[0].keys()
    for row in rows:
        ids, mask = row["input_ids"], row["loss_mask"]
        assert isinstance(ids, list) and isinstance(mask, list)
        assert all(type(v) is int for v in ids + mask)  # no bools, floats or nested lists
        assert len(ids) == len(mask) > 0
        assert set(mask) <= {0, 1} and sum(mask) >= 1
    return rows


def speculators_rows(path):
    """speculators prepare_data.py --data FILE.jsonl: one JSON object per line, the same columns in every
    row (an Arrow JSON reader infers one schema), input_ids/loss_mask of equal length; seq_len consistent."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    columns = set(rows[0])
    assert {"input_ids", "loss_mask"} <= columns
    for row in rows:
        assert set(row) == columns
        assert len(row["input_ids"]) == len(row["loss_mask"]) == row["seq_len"]
        assert all(type(v) is int for v in row["input_ids"] + row["loss_mask"])
    return rows


@pytest.mark.parametrize(("fmt", "loader"),
                         [("specforge", specforge_rows), ("speculators", speculators_rows)])
def test_the_export_is_what_the_loader_accepts_and_exactly_the_dataset(tmp_path, fmt, loader):
    make_dataset(tmp_path / "d", rows=90)
    out = tmp_path / f"{fmt}.jsonl"
    summary = export(tmp_path / "d", fmt=fmt, out=out)
    rows = loader(out)
    table = pq.read_table(tmp_path / "d" / "segments")
    assert summary.rows == len(rows) == table.num_rows == 90
    expected = {r["id"]: r for r in table.to_pylist()}
    for row in rows:
        source = expected.pop(row["id"])
        assert row["input_ids"] == source["input_ids"]  # token-exact
        assert row["loss_mask"] == source["loss_mask"] and row["seq_len"] == source["seq_len"]
    assert not expected
    assert not list(out.parent.glob(".*.tmp"))


def test_the_export_streams_in_memory_that_does_not_grow_with_the_dataset(tmp_path):
    def peak_and_size(segments):
        make_dataset(tmp_path / str(segments), rows=60 * segments, segments=segments, max_len=200)
        out = tmp_path / f"{segments}.jsonl"
        tracemalloc.start()
        try:
            export(tmp_path / str(segments), fmt="specforge", out=out)
            return tracemalloc.get_traced_memory()[1], out.stat().st_size
        finally:
            tracemalloc.stop()

    small_peak, small_size = peak_and_size(2)
    big_peak, big_size = peak_and_size(10)
    assert big_size > 4 * small_size
    # 5x the data: memory that grew with the dataset would be ~5x; allow for allocator and GC noise
    assert big_peak < 3 * small_peak, (small_peak, big_peak)


def test_export_of_a_directory_that_is_not_a_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="not an eaglefeed dataset"):
        export(tmp_path, fmt="specforge", out=tmp_path / "x.jsonl")
    assert main(["export", str(tmp_path), "--format", "specforge", "--out", str(tmp_path / "x.jsonl")]) == 1


def test_the_export_command(tmp_path, capsys):
    make_dataset(tmp_path / "d", rows=9)
    out = str(tmp_path / "o.jsonl")
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", out]) == 0
    assert "export: 9 rows" in capsys.readouterr().out
    assert len(speculators_rows(tmp_path / "o.jsonl")) == 9
    assert main(["export", str(tmp_path / "d"), "--format", "specforge", "--out", "-"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 9 and "export: 9 rows" in captured.err


@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
def test_both_exports_keep_the_users_row_id_as_source_id(tmp_path, fmt):
    make_dataset(tmp_path / "d", rows=6)
    export(tmp_path / "d", fmt=fmt, out=tmp_path / "out.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["source_id"]) for r in rows) == [(f"r{i}", str(i)) for i in range(6)]
