"""The built wheel adds one top-level name, ``eaglefeed``, and leaves other packages alone.

Before the single namespace, installing eaglefeed overwrote PyPI's ``dataset`` package and
uninstalling eaglefeed deleted it. This builds the wheel from a copy of the tree, installs it into
a fresh venv that already holds PyPI's ``dataset``, and checks both directions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "eaglefeed", "producers", "consumers", "schemas")
LISTING = ("import json, sysconfig, pathlib; p = pathlib.Path(sysconfig.get_paths()['purelib']);"
           "print(json.dumps(sorted(x.name for x in p.iterdir())))")
PYPI_DATASET = ("import dataset, json, pathlib; print(json.dumps([dataset.__file__, "
                "callable(dataset.connect), pathlib.Path(dataset.__file__).read_text()[:200]]))")

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The eaglefeed wheel, built from a copy of the tree (the build leaves nothing in the repo)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, src)
    (found,) = out.glob("eaglefeed-*.whl")
    return found


def test_the_wheel_holds_only_the_namespace(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"eaglefeed"}
    # the joined folders, their data files and the dev tools' assets travel inside the namespace
    for wanted in ("eaglefeed/producers/publisher.py", "eaglefeed/consumers/sink/loop.py",
                   "eaglefeed/schemas/history/prompt/v1.avsc", "eaglefeed/devtools/localbroker/pom.xml",
                   "eaglefeed/devtools/demo/sample_prompts.jsonl"):
        assert wanted in names


def test_installing_and_uninstalling_leaves_pypi_dataset_intact(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    _run(py, "-m", "pip", "install", "--quiet", "dataset")  # PyPI's dataset (SQL for humans)
    before_files = set(json.loads(_run(py, "-c", LISTING)))
    before_dataset = json.loads(_run(py, "-c", PYPI_DATASET, cwd=tmp_path))

    _run(py, "-m", "pip", "install", "--quiet", "--no-deps", wheel)
    added = set(json.loads(_run(py, "-c", LISTING))) - before_files
    assert {a for a in added if not a.endswith(".dist-info")} == {"eaglefeed"}, added
    assert json.loads(_run(py, "-c", PYPI_DATASET, cwd=tmp_path)) == before_dataset
    installed = _run(py, "-c", "import eaglefeed.core.errors as e; print(e.__file__)", cwd=tmp_path)
    assert str(venv) in installed  # the wheel's copy, not the repo's

    _run(py, "-m", "pip", "uninstall", "--quiet", "--yes", "eaglefeed")
    assert json.loads(_run(py, "-c", PYPI_DATASET, cwd=tmp_path)) == before_dataset
    assert set(json.loads(_run(py, "-c", LISTING))) == before_files
