"""``export --hidden-states`` read back by speculators' and SpecForge's own offline loaders (.venv-engine).

The dataset is made here (store files from ``hidden_states.write_file``, rows through the sink
and the in-memory Kafka: no vLLM); the frameworks are the pinned ones of .venv-engine
(scripts/engine/frameworks.txt: speculators 0.9.0, specforge 0.2.0, hs-connectors 0.9.0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_frameworks import run
from tests.unit.dataset.states_support import build, build_lanes, model_dir

LOADERS = Path(__file__).with_name("state_loaders.py")


def loaders(*args: str) -> dict[str, Any]:
    return json.loads(run([str(LOADERS), *args], engine=True).stdout.splitlines()[-1])


def test_speculators_arrow_dataset_reads_our_linked_states_exactly(tmp_path: Path) -> None:
    build(tmp_path / "d", rows=5, lengths={0: 2, 1: 9, 2: 5, 3: 14, 4: 3})
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "speculators", "--out",
                   str(out), "--hidden-states", "--max-length", "10", "--length-policy", "truncate"]).stdout
    assert "speculators hidden states: 5 rows" in printed and "3 linked, 2 written" in printed
    result = loaders("speculators", str(tmp_path / "d"), str(out.parent))
    assert result["version"] == "0.9.0" and result["rows"] == 5
    for check in result["checks"]:
        assert check == {"ids": True, "loss_mask": True, "aux": True, "last": True, "dtype": "torch.bfloat16",
                         "lengths": True}


def test_specforge_offline_reader_reads_our_ckpt_files_exactly(tmp_path: Path) -> None:
    build(tmp_path / "d", rows=4, lengths={0: 2, 1: 9, 2: 5, 3: 14})
    model = model_dir(tmp_path / "model")
    out = tmp_path / "train" / "prompts.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "specforge", "--out",
                   str(out), "--hidden-states", "--final-norm", str(model), "--max-length", "10",
                   "--length-policy", "truncate"], engine=True).stdout
    assert "specforge hidden states: 4 rows" in printed
    folder = out.parent / "hidden_states"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.ckpt")) == [
        f"rows_0-2000/data_{i}.ckpt" for i in range(4)]
    result = loaders("specforge", str(tmp_path / "d"), str(folder), str(model))
    assert result["version"] == "0.2.0" and result["rows"] == 4
    for check in result["checks"]:
        kept = check["shapes"][0][1]
        assert check["shapes"] == [[1, kept, 8], [1, kept, 24]]  # three auxiliary layers of 8
        assert check["ids"] and check["loss_mask"] and check["aux"] and check["dtype"] == "torch.bfloat16"
        # layer N after the final norm: bit for bit what transformers' LlamaRMSNorm makes of ours
        assert check["target_equal_rmsnorm"] and check["target_max_diff"] == 0


def test_speculators_fp8_backend_reads_our_linked_fp8_files_in_their_shape(tmp_path: Path) -> None:
    """Our fp8 file is speculators' FP8 file: its FP8Transfer (--hidden-states-backend fp8) scales it."""
    build(tmp_path / "d", rows=4, dtype="float8_e4m3fn", lengths={0: 2, 1: 9, 2: 5, 3: 14})
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "speculators", "--out",
                   str(out), "--hidden-states", "--max-length", "10", "--length-policy", "truncate"]).stdout
    assert "2 linked, 2 written" in printed and "--hidden-states-backend fp8" in printed
    result = loaders("speculators", str(tmp_path / "d"), str(out.parent))
    assert result["rows"] == 4 and result["max_rel"] < 2**-7
    for check in result["checks"]:
        assert check == {"ids": True, "loss_mask": True, "aux": True, "last": True, "dtype": "torch.bfloat16",
                         "lengths": True}


def test_specforge_reads_fp8_rows_dequantized_to_bf16_exactly(tmp_path: Path) -> None:
    build(tmp_path / "d", rows=3, dtype="float8_e4m3fn", lengths={0: 2, 1: 9, 2: 5})
    model = model_dir(tmp_path / "model")
    out = tmp_path / "train" / "prompts.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "specforge", "--out",
                   str(out), "--hidden-states", "--final-norm", str(model)], engine=True).stdout
    assert "specforge hidden states: 3 rows" in printed
    result = loaders("specforge", str(tmp_path / "d"), str(out.parent / "hidden_states"), str(model))
    assert result["rows"] == 3
    for check in result["checks"]:
        kept = check["shapes"][0][1]
        assert check["shapes"] == [[1, kept, 8], [1, kept, 24]]
        assert check["ids"] and check["loss_mask"] and check["aux"] and check["dtype"] == "torch.bfloat16"
        assert check["target_equal_rmsnorm"] and check["target_max_diff"] == 0


LANES = {"c0": [4, 3, 5], "c1": [2, 6], "c2": [7]}  # final turns of 19, 13 and 10 ids; plain rows of 8


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_speculators_reads_a_lane_export_as_load_lanes_gives_it(tmp_path: Path, dtype: str) -> None:
    """One row per lane, its turns' files joined (fp8: codes and scales), cut as one row: theirs = ours."""
    build_lanes(tmp_path / "d", LANES, dtype=dtype)
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "speculators", "--out",
                   str(out), "--hidden-states", "--lanes", "--max-length", "12", "--length-policy",
                   "truncate"]).stdout
    assert "speculators hidden states: 5 rows (2 of them lanes of several turns, joined)" in printed
    result = loaders("--lanes", "speculators", str(tmp_path / "d"), str(out.parent))
    assert result["rows"] == 5 and sorted(check.pop("turns") for check in result["checks"]) == [1, 1, 1, 2, 3]
    if dtype != "bfloat16":
        assert result["max_rel"] < 2**-7  # speculators scales in bf16, eaglefeed in float32
    for check in result["checks"]:
        assert check == {"ids": True, "loss_mask": True, "aux": True, "last": True, "dtype": "torch.bfloat16",
                         "lengths": True}


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_specforge_reads_a_lane_export_as_load_lanes_gives_it(tmp_path: Path, dtype: str) -> None:
    build_lanes(tmp_path / "d", LANES, dtype=dtype)
    model = model_dir(tmp_path / "model")
    out = tmp_path / "train" / "prompts.jsonl"
    out.parent.mkdir()
    printed = run(["-m", "eaglefeed", "export", str(tmp_path / "d"), "--format", "specforge", "--out",
                   str(out), "--hidden-states", "--lanes", "--final-norm", str(model), "--max-length", "12",
                   "--length-policy", "truncate"], engine=True).stdout
    assert "specforge hidden states: 5 rows (2 of them lanes of several turns, joined)" in printed
    folder = out.parent / "hidden_states"
    result = loaders("--lanes", "specforge", str(tmp_path / "d"), str(folder), str(model))
    assert result["rows"] == 5 and sorted(check.pop("turns") for check in result["checks"]) == [1, 1, 1, 2, 3]
    for check in result["checks"]:
        kept = check["shapes"][0][1]
        assert check["shapes"] == [[1, kept, 8], [1, kept, 24]]
        assert check["ids"] and check["loss_mask"] and check["aux"] and check["dtype"] == "torch.bfloat16"
        assert check["target_equal_rmsnorm"] and check["target_max_diff"] == 0
