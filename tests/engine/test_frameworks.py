"""The demo dataset handed to SpecForge and speculators, loaded by their own code (torch, in .venv-engine).

Every eaglefeed command here is one docs/TRAINING.md's "Train with SpecForge / with speculators"
section shows. The demo runs in this (main) Python; the framework code runs in .venv-engine's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.engine.conftest import ENGINE_PYTHON, REPO, TOKENIZER_DIR

LOADERS = Path(__file__).with_name("framework_loaders.py")
DRAFT, TARGET = 1024, 4096  # the demo tokenizer has 4096 ids


def run(cmd: list[str], *, engine: bool = False, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with one of the two Pythons, in a session of its own (a timeout kills its children too)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO)
    python = str(ENGINE_PYTHON) if engine else sys.executable
    proc = subprocess.Popen([python, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this command leads: only what it started
        proc.communicate()
        raise
    assert proc.returncode == 0, f"{cmd} failed:\n{out[-2000:]}\n{err[-4000:]}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def eaglefeed(*args: str, engine: bool = False) -> str:
    return run(["-m", "eaglefeed", *args], engine=engine).stdout


def loaders(*args: str) -> dict[str, Any]:
    return json.loads(run([str(LOADERS), *args], engine=True).stdout.splitlines()[-1])


def speculators(*args: str) -> None:
    run(["-m", "speculators", *args], engine=True)  # the `speculators` console script


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``eaglefeed demo``'s dataset (a local broker, the stand-in, the sample prompts; about a minute)."""
    base = tmp_path_factory.mktemp("frameworks")
    eaglefeed("demo", "--output", str(base / "demo-data"), "--work-dir", str(base / "work"))
    return base / "demo-data"


def rows_of(demo: Path) -> list[tuple[list[int], list[int]]]:
    table = pq.read_table(demo / "segments", columns=["input_ids", "loss_mask"])
    return sorted((r["input_ids"], r["loss_mask"]) for r in table.to_pylist())


def test_specforge_loads_our_vocab_mapping(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "vocab_mapping.pt"
    printed = eaglefeed("vocab-map", str(demo), "--format", "specforge", "--draft-vocab-size", str(DRAFT),
                        "--target-vocab-size", str(TARGET), "--out", str(out), engine=True)
    rows = rows_of(demo)
    loss_tokens = sum(sum(mask) for _ids, mask in rows)
    assert f"{loss_tokens} loss tokens in {len(rows)} rows" in printed
    assert "read again" not in printed  # the token counts came from the sidecars
    result = loaders("specforge-vocab", str(out), str(DRAFT), str(TARGET), str(demo / "segments"))
    assert result["loaded"] and result["d2t_dtype"] == "torch.int64" and result["t2d_dtype"] == "torch.bool"
    # the same choice as SpecForge's own builder, up to the order of ties at the last count
    assert result["same_counts"] and result["same_above_boundary"]


def test_speculators_loads_our_vocab_files_and_token_freq(demo: Path, tmp_path: Path) -> None:
    # a folder holding only the JSONL: `--data DIR` of the dataset itself would read manifest.jsonl
    export_dir = tmp_path / "export"
    export_dir.mkdir()
    eaglefeed("export", str(demo), "--format", "speculators", "--out", str(export_dir / "data.jsonl"))
    prepared = tmp_path / "prepared"
    speculators("prepare-data", "--model", str(TOKENIZER_DIR), "--data", str(export_dir), "--output",
                str(prepared), "--no-skip-token-freq")
    eaglefeed("vocab-map", str(demo), "--format", "speculators", "--draft-vocab-size", str(DRAFT),
              "--target-vocab-size", str(TARGET), "--out", str(prepared))
    eaglefeed("vocab-map", str(demo), "--format", "token-freq", "--out", str(tmp_path / "token_freq.pt"),
              engine=True)
    mapping = loaders("speculators-vocab", str(prepared), str(DRAFT), str(prepared / "token_freq.pt"),
                      str(TARGET))
    assert mapping == {"size": DRAFT, "d2t_equal": True, "t2d_equal": True}
    freq = loaders("token-freq", str(tmp_path / "token_freq.pt"), str(prepared / "token_freq.pt"))
    loss_tokens = sum(sum(mask) for _ids, mask in rows_of(demo))
    assert freq["equal"] and freq["total"] == loss_tokens
    arrow = loaders("arrow", str(prepared))
    assert sorted((r["input_ids"], r["loss_mask"]) for r in arrow["rows"]) == rows_of(demo)
    assert all(r["seq_len"] == len(r["input_ids"]) for r in arrow["rows"])


def test_speculators_reads_the_segments_through_hf_and_our_cut_matches_its_seq_length(
        demo: Path, tmp_path: Path) -> None:
    via_hf = tmp_path / "via-hf"
    speculators("prepare-data", "--model", str(TOKENIZER_DIR), "--data", f"hf:{demo.resolve()}/segments",
                "--output", str(via_hf))
    arrow = loaders("arrow", str(via_hf))
    assert sorted((r["input_ids"], r["loss_mask"]) for r in arrow["rows"]) == rows_of(demo)

    # --seq-length 256 cuts and drops silently; our export with the same cut says what it costs
    export_dir = tmp_path / "export"
    export_dir.mkdir()
    printed = eaglefeed("export", str(demo), "--format", "speculators", "--out",
                        str(export_dir / "data.jsonl"), "--max-length", "256", "--length-policy", "truncate")
    written = int(printed.split("export: ")[1].split(" rows")[0])
    theirs = tmp_path / "theirs"
    speculators("prepare-data", "--model", str(TOKENIZER_DIR), "--data", f"hf:{demo.resolve()}/segments",
                "--output", str(theirs), "--seq-length", "256")
    ours = [json.loads(line) for line in (export_dir / "data.jsonl").read_text().splitlines()]
    assert len(ours) == written
    assert sorted((r["input_ids"], r["loss_mask"]) for r in loaders("arrow", str(theirs))["rows"]) == sorted(
        (r["input_ids"], r["loss_mask"]) for r in ours)


def test_every_command_of_the_readme_section_runs(demo: Path, tmp_path: Path) -> None:
    """docs/TRAINING.md's commands as written, in a Python with torch; the model is the demo tokenizer."""
    from tests.unit.test_readme_training import readme_commands

    (tmp_path / "train").mkdir()
    for command in readme_commands():
        names = {"DIR": str(demo), "Qwen/Qwen3-8B": str(TOKENIZER_DIR)}
        args = [names.get(a, a) for a in command]
        args = [str(tmp_path / a) if a.startswith(("train/", "prepared")) else a for a in args]
        if args[0] == "eaglefeed":
            eaglefeed(*args[1:], engine=True)
        else:
            speculators(*args[1:])
    assert (tmp_path / "train" / "vocab_mapping.pt").is_file()
    assert {p.name for p in (tmp_path / "prepared").iterdir()} >= {"d2t-32000.npy", "t2d-32000.npy"}
    assert loaders("specforge-vocab", str(tmp_path / "train" / "vocab_mapping.pt"), "32000", "151936") == {
        "loaded": True}
