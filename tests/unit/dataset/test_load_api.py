"""``eaglefeed.load(DIR, format=None)``: training code reads the dataset, no subprocess (issue 27 item 10)."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eaglefeed
from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.dataset import export, iter_batches, shards, snapshot
from eaglefeed.dataset.manifest import append_manifest
from tests.unit.dataset.test_export import make_dataset


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "DIR"
    make_dataset(root, rows=30, max_len=40)
    pq.write_table(pq.read_table(root / "segments" / "seg-0.parquet"), root / "segments" / "stray.parquet")
    return root  # stray.parquet is not in the manifest: not part of the dataset


def live_ids(root):
    with snapshot(root) as files:
        return [i for batch in iter_batches(files, columns=["id"]) for i in batch.column("id").to_pylist()]


def test_load_gives_the_live_rows_of_the_manifest_as_a_pyarrow_table(dataset):
    table = eaglefeed.load(dataset)
    assert isinstance(table, pa.Table)
    assert table.schema.names == shards.TRAINING_SCHEMA.names
    assert table.column("id").to_pylist() == live_ids(dataset) and table.num_rows == 30  # stray left out
    for ids, mask, prompt, seq in zip(*(table.column(n).to_pylist()
                                        for n in ("input_ids", "loss_mask", "prompt_len", "seq_len")),
                                      strict=True):
        assert len(ids) == len(mask) == seq and mask == [0] * prompt + [1] * (seq - prompt)
    assert eaglefeed.load(str(dataset), columns=["id", "seq_len"]).schema.names == ["id", "seq_len"]


@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
@pytest.mark.parametrize("cut", [{}, {"max_length": 30, "policy": "truncate"},
                                 {"max_length": 30, "policy": "drop"}])
def test_a_format_gives_exactly_the_rows_its_export_writes(dataset, tmp_path, fmt, cut):
    out = tmp_path / f"{fmt}.jsonl"
    export(dataset, fmt=fmt, out=out, **cut)
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    loaded = eaglefeed.load(dataset, fmt, **cut).to_pylist()
    assert loaded == exported
    assert set(loaded[0]) == {"id", "input_ids", "loss_mask", "seq_len", "source_id"}
    if cut:  # the cut did cut: some rows are longer than 30
        assert sum(n > 30 for n in eaglefeed.load(dataset).column("seq_len").to_pylist()) > 3
        assert all(row["seq_len"] <= 30 for row in loaded)
        assert (len(loaded) < 30) if cut["policy"] == "drop" else any(r["seq_len"] == 30 for r in loaded)


def test_policy_error_refuses_rows_that_are_too_long(dataset):
    with pytest.raises(DatasetError, match="longer than max_length 30"):
        eaglefeed.load(dataset, "specforge", max_length=30, policy="error")
    assert eaglefeed.load(dataset, "specforge", max_length=10_000, policy="error").num_rows == 30


def test_files_of_an_older_schema_are_brought_to_the_current_one(tmp_path):
    root = tmp_path / "old"
    make_dataset(root, rows=6, segments=2)
    first = root / "segments" / "seg-0.parquet"
    old = pq.read_table(first).drop_columns(["source_id", "conversation_id", "history_mode", "lane"])
    pq.write_table(old, first)  # as a schema-2 sink wrote it
    table = eaglefeed.load(root)
    assert table.schema.names == shards.TRAINING_SCHEMA.names and table.num_rows == 6
    assert table.column("history_mode").to_pylist() == ["original"] * 6
    assert table.column("source_id").to_pylist() == table.column("source_row").to_pylist()


def test_an_empty_dataset_and_a_folder_that_is_not_one(tmp_path):
    (tmp_path / "empty").mkdir()
    append_manifest(tmp_path / "empty", {"kind": "flush", "added": [], "offsets": {}})
    assert eaglefeed.load(tmp_path / "empty").num_rows == 0
    empty = eaglefeed.load(tmp_path / "empty", "specforge")
    assert empty.schema.names == ["id", "input_ids", "loss_mask", "seq_len", "source_id"]
    with pytest.raises(DatasetError, match="not an eaglefeed dataset"):
        eaglefeed.load(tmp_path)


@pytest.mark.parametrize(("args", "kwargs"), [
    (("jsonl",), {}), ((None,), {"max_length": 10, "policy": "drop"}), (("specforge",), {"max_length": 10}),
    (("specforge",), {"columns": ["id"]}), ((None,), {"columns": ["nope"]}),
])
def test_options_that_make_no_sense_are_refused(dataset, args, kwargs):
    with pytest.raises(ValueError):
        eaglefeed.load(dataset, *args, **kwargs)


def test_a_datasets_dataset_feeds_a_map_as_training_code_would(dataset):
    datasets = pytest.importorskip("datasets")  # in the dev extra
    rows = eaglefeed.load(dataset, format="specforge", as_dataset=True)
    assert isinstance(rows, datasets.Dataset) and len(rows) == 30
    mapped = rows.map(lambda row: {"loss_tokens": sum(row["loss_mask"]), "n": len(row["input_ids"])})
    table = eaglefeed.load(dataset)
    assert mapped["loss_tokens"] == [sum(m) for m in table.column("loss_mask").to_pylist()]
    assert mapped["n"] == table.column("seq_len").to_pylist()
    assert eaglefeed.load(dataset, as_dataset=True).column_names == shards.TRAINING_SCHEMA.names


def test_without_the_datasets_package_as_dataset_says_how_to_install_it(dataset, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ImportError
    with pytest.raises(ConfigError, match="pip install datasets"):
        eaglefeed.load(dataset, as_dataset=True)
    assert eaglefeed.load(dataset).num_rows == 30


def test_the_readme_example_runs_as_written(dataset, monkeypatch):
    pytest.importorskip("datasets")
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "eaglefeed.load(" in code
    monkeypatch.chdir(dataset.parent)
    scope: dict[str, object] = {}
    exec(code, scope)  # noqa: S102 - the README's own example
    assert isinstance(scope["table"], pa.Table) and len(scope["rows"]) == 30
