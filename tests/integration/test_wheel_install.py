"""The built wheel adds one top-level name, ``eaglefeed``, leaves other packages alone, and works.

Before the single namespace, installing eaglefeed overwrote PyPI's ``dataset`` package and
uninstalling eaglefeed deleted it. This builds the wheel from a copy of the tree, installs it into
a fresh venv that already holds PyPI's ``dataset``, and checks both directions. The copy holds
exactly what the Dockerfile COPYs (read from the Dockerfile), so a folder the image lacks fails
here: :func:`test_the_image_install_runs_produce_sink_and_stats_from_root` installs it as the
image does (``pip install .``, with dependencies) and runs the compose stages from ``/``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR

ROOT = Path(__file__).resolve().parents[2]
LISTING = ("import json, sysconfig, pathlib; p = pathlib.Path(sysconfig.get_paths()['purelib']);"
           "print(json.dumps(sorted(x.name for x in p.iterdir())))")
PYPI_DATASET = ("import dataset, json, pathlib; print(json.dumps([dataset.__file__, "
                "callable(dataset.connect), pathlib.Path(dataset.__file__).read_text()[:200]]))")

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path | str | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def dockerfile_sources(dockerfile: Path = ROOT / "Dockerfile") -> list[str]:
    """What the image's ``COPY`` lines take from the build context (files and folders)."""
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0].upper() == "COPY":
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tree holding only what the Dockerfile COPYs (symlinks kept, as COPY keeps them)."""
    src = tmp_path_factory.mktemp("src")
    for name in dockerfile_sources():
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(image_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The eaglefeed wheel, built from the image's copy of the tree (the build leaves nothing in the repo)."""
    src = image_tree
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


def test_the_build_requires_a_setuptools_that_reads_the_spdx_license_string():
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is 3.11+; Python 3.10 is supported)
    assert re.search(r'^license = "Apache-2.0"$', text, re.M)  # PEP 639: setuptools 77 and later
    floor = re.search(r'^requires = \["setuptools>=(\d+)', text, re.M)
    assert floor is not None and int(floor.group(1)) >= 77


def test_the_dockerfile_copies_the_namespace_and_its_joined_folders():
    assert {"pyproject.toml", "eaglefeed", "producers", "consumers", "schemas"} <= set(dockerfile_sources())


@pytest.mark.kafka
def test_the_image_install_runs_produce_sink_and_stats_from_root(image_tree: Path, tmp_path: Path,
                                                                 kafka_config: KafkaConfig):
    """``pip install .`` of what the image holds, into a clean venv with dependencies, run from ``/``."""
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "pip", "install", "--quiet", ".", cwd=image_tree)  # the Dockerfile's RUN
    exe = venv / "bin" / "eaglefeed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EAGLEFEED_", "PYTHON", "VIRTUAL_ENV"))}
    env["EAGLEFEED_CACHE_DIR"] = str(tmp_path / "cache")
    kafka = ["--bootstrap-servers", kafka_config.bootstrap_servers,
             "--topic-prefix", kafka_config.topic_prefix]
    assert "--state-dir" in _run(exe, "produce", "--help", cwd="/", env=env)
    assert "--exit-when-idle" in _run(exe, "sink", "--help", cwd="/", env=env)

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q {i}"}]}) + "\n"
                               for i in range(3)))
    out = _run(exe, "produce", prompts, "--tokenizer", TOKENIZER_DIR, "--workers", "0", "--partitions", "1",
               *kafka, cwd="/", env=env)
    assert "published 3 prompts" in out
    dataset = tmp_path / "dataset"
    argv = [str(a) for a in (exe, "sink", "--output", dataset, "--exit-when-idle", "1", *kafka)]
    sink = subprocess.run(argv, capture_output=True, text=True, cwd="/", env=env, timeout=600)
    # no generate worker ran: the dataset is empty, and the sink says the prompts are still upstream
    assert sink.returncode == 1 and "3 prompts not yet generated upstream" in sink.stdout + sink.stderr, sink
    assert (dataset / "owner.json").exists()

    _write_tiny_dataset(tmp_path / "tiny")
    stats = json.loads(_run(exe, "stats", tmp_path / "tiny", "--json", cwd="/", env=env))
    assert stats["rows"] == 2


def _write_tiny_dataset(root: Path) -> None:
    """Two rows written the way the sink writes them (by this checkout's code)."""
    from eaglefeed.dataset import manifest, shards
    from eaglefeed.schemas.columnar import GenerationBatch

    records = [{"id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [9, 9],
                "output_ids": [5, 2], "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 2,
                "completion_tokens": 2, "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
                "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s",
                "source_row": str(i), "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}",
                "tokenizer_id": "t", "tokenizer_hash": "h", "chat_template_hash": "c",
                "prompt_created_at": 1, "created_at": 2} for i in range(2)]
    table = shards.batch_to_table(GenerationBatch.from_records(records))
    entry = shards.write_segment(root, "a.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 2]}})
