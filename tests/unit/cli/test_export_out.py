"""``export --out`` never overwrites silently: not inside the dataset, not an existing file, unless
``--force`` (issue 36, item 11); the dataset's own files never, even then."""

from __future__ import annotations

import pytest

from eaglefeed.cli.main import main
from tests.unit.dataset.test_export import make_dataset


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, rows=6)
    return root


def export(dataset, out, *flags):
    return main(["export", str(dataset), "--format", "specforge", "--out", str(out), *flags])


def errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def test_an_out_inside_the_dataset_is_refused_in_one_line_unless_forced(dataset, caplog):
    before = sorted(p.name for p in dataset.iterdir())
    assert export(dataset, dataset / "data.jsonl") == 1
    assert errors(caplog) == [f"--out {dataset / 'data.jsonl'} is inside the dataset {dataset}: "
                              "export elsewhere, or pass --force to write it there"]
    assert sorted(p.name for p in dataset.iterdir()) == before
    assert export(dataset, dataset / "data.jsonl", "--force") == 0
    assert (dataset / "data.jsonl").stat().st_size > 0


def test_an_existing_out_is_refused_unless_forced(dataset, tmp_path, caplog):
    out = tmp_path / "data.jsonl"
    out.write_text("keep me\n")
    assert export(dataset, out) == 1
    assert errors(caplog) == [f"--out {out} exists: pass --force to overwrite it"]
    assert out.read_text() == "keep me\n"
    assert export(dataset, out, "--force") == 0
    assert out.read_text() != "keep me\n"


@pytest.mark.parametrize("own", ["manifest.jsonl", "segments/seg-0.parquet"])
def test_the_datasets_own_files_are_never_overwritten(dataset, caplog, own):
    target = dataset / own
    data = target.read_bytes()
    assert export(dataset, target, "--force") == 1
    assert errors(caplog) == [f"--out {target} is one of the dataset's own files: export elsewhere"]
    assert target.read_bytes() == data


def test_a_folder_of_the_users_own_inside_the_dataset_is_allowed_with_force(dataset, caplog):
    (dataset / "exports").mkdir()
    assert export(dataset, dataset / "exports" / "data.jsonl") == 1
    assert export(dataset, dataset / "exports" / "data.jsonl", "--force") == 0
