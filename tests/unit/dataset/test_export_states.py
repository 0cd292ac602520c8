"""``export --hidden-states``: speculators' offline layout (no torch) and the errors of both formats."""

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.export import export
from eaglefeed.dataset.export_states import FinalNorm
from eaglefeed.dataset.hidden_states import read_header, to_float32
from eaglefeed.dataset.state_files import write as store_write
from tests.unit.dataset.states_support import HIDDEN, LAYERS, N, build, model_dir


def arrow_rows(folder):
    state = json.loads((folder / "state.json").read_text())
    assert state["_format_type"] == "torch"
    (name,) = (f["filename"] for f in state["_data_files"])
    return pa.ipc.open_stream(str(folder / name)).read_all().to_pylist()


def tensors(path):
    """A safetensors file's tensors, read as safetensors lays them out (bf16 as its uint16 bits)."""
    header = read_header(path)
    kinds = {"BF16": np.uint16, "F32": np.float32, "I64": np.int64}
    data = path.read_bytes()[header.data_start:]
    return {name: np.frombuffer(data[begin:end], kinds[code]).reshape(shape)
            for name, (code, shape, begin, end) in header.tensors.items()}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_speculators_layout_links_our_files_and_writes_the_rows_they_cover(tmp_path, capsys, dtype):
    made = build(tmp_path / "d", dtype=dtype)
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out),
                 "--hidden-states"]) == 0
    printed = capsys.readouterr().out
    assert "speculators hidden states: 4 rows" in printed and "4 linked" in printed
    assert "aux layers [1, 2, 3] + last layer 4" in printed
    assert len(out.read_text().splitlines()) == 4  # the token export is still written
    rows = arrow_rows(out.parent)
    for i, (row, rec) in enumerate(zip(rows, made, strict=True)):
        ids = rec["prompt_ids"] + rec["output_ids"]
        assert row == {"input_ids": ids[:-1], "loss_mask": [0] * 3 + [1] * (len(ids) - 4),
                       "seq_len": len(ids) - 1}
        ours = tmp_path / "d" / rec["hidden_states"]["uri"]
        theirs = out.parent / "hidden_states" / f"hs_{i}.safetensors"
        assert os.stat(theirs).st_ino == os.stat(ours).st_ino  # a hard link, not a copy
        got = tensors(theirs)
        assert got["token_ids"].tolist() == row["input_ids"]
        assert got["hidden_states"].shape == (len(ids) - 1, len(LAYERS), HIDDEN)  # aux..., then N last
    assert not list(out.parent.glob(".hidden_states.tmp*"))


def test_a_length_cut_cuts_the_states_as_the_ids(tmp_path, capsys):
    made = build(tmp_path / "d", lengths={0: 3, 1: 12, 2: 5, 3: 20})  # 3 prompt ids each
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out),
                 "--hidden-states", "--max-length", "8", "--length-policy", "truncate"]) == 0
    assert "2 linked, 2 written" in capsys.readouterr().out
    rows = arrow_rows(out.parent)
    for i, (row, rec) in enumerate(zip(rows, made, strict=True)):
        ids = rec["prompt_ids"] + rec["output_ids"]
        kept = min(8, len(ids) - 1)  # a cut row keeps 8 ids, all with states; a whole one drops its last
        assert row["input_ids"] == ids[:kept] and row["seq_len"] == kept
        got = tensors(out.parent / "hidden_states" / f"hs_{i}.safetensors")
        source = tensors(tmp_path / "d" / rec["hidden_states"]["uri"])
        assert got["token_ids"].tolist() == ids[:kept]
        assert np.array_equal(got["hidden_states"], source["hidden_states"][:kept])
    assert [json.loads(line)["seq_len"] for line in out.read_text().splitlines()] == [6, 8, 8, 8]


def test_rows_without_states_stop_the_export_naming_the_count_unless_skipped(tmp_path, capsys):
    build(tmp_path / "d", rows=5, without=(1, 3))
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    with pytest.raises(DatasetError, match=r"2 rows have no hidden states \(first: r1, r3\)"):
        export(tmp_path / "d", fmt="speculators", out=out, hidden_states={})
    assert list(out.parent.iterdir()) == []  # nothing written, the JSONL neither
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out),
                 "--hidden-states", "--skip-missing-states"]) == 0
    assert "3 rows" in capsys.readouterr().out and len(arrow_rows(out.parent)) == 3
    assert sorted(p.name for p in (out.parent / "hidden_states").iterdir()) == [
        f"hs_{i}.safetensors" for i in range(3)]
    with pytest.raises(ConfigError, match="exists"):  # never over an earlier layout
        export(tmp_path / "d", fmt="speculators", out=out, hidden_states={"skip_missing": True})


@pytest.mark.parametrize("fmt", ["speculators", "specforge"])
def test_without_layer_n_both_formats_refuse(tmp_path, fmt):
    build(tmp_path / "d", rows=2, layers=(1, 2, 3))
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    flags = {"final_norm": model_dir(tmp_path / "model")} if fmt == "specforge" else {}
    with pytest.raises(DatasetError, match=r"last layer N = 4 .*before the final norm.*\[1, 2, 3\]"):
        export(tmp_path / "d", fmt=fmt, out=out, hidden_states=flags)


def test_specforge_needs_torch_and_the_final_norm(tmp_path, caplog):
    build(tmp_path / "d", rows=1)
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    args = ["export", str(tmp_path / "d"), "--format", "specforge", "--out", str(out), "--hidden-states"]
    assert main(args) != 0
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "pip install torch" in message and "\n" not in message
    else:
        assert "--final-norm MODEL_DIR" in message and "before it" in message
    assert list(out.parent.iterdir()) == []
    caplog.clear()
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", "-",
                 "--hidden-states"]) != 0
    assert "not -" in caplog.text


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_final_norm_is_llama_rmsnorm(tmp_path, dtype):
    norm = FinalNorm.from_model(model_dir(tmp_path / "m", eps=1e-6))
    assert norm.weight.shape == (HIDDEN,) and norm.eps == 1e-6
    x = (np.random.default_rng(3).standard_normal((5, HIDDEN)) * 4).astype(np.float32)
    path = tmp_path / "s.safetensors"
    store_write.write_file(path, states=x[:, None], token_ids=range(5), layer_ids=[N], num_hidden_layers=N,
                             dtype=dtype)
    raw = hidden_states.open_states(tmp_path, hidden_states.HiddenStatesRef.from_record(
        {"uri": path.name, "bytes": 0, "sha256": "", "shape": [5, 1, HIDDEN], "dtype": dtype,
         "layer_ids": [N]}))
    got = to_float32(norm.apply(raw[:, 0], dtype), dtype)
    wide = to_float32(raw[:, 0], dtype).astype(np.float64)
    expected = wide / np.sqrt((wide ** 2).mean(-1, keepdims=True) + 1e-6) * norm.weight
    assert np.allclose(got, expected, rtol=2 ** -7 if dtype == "bfloat16" else 1e-6, atol=0)
