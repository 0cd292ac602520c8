"""FP8 (``float8_e4m3fn``) store files: size, the checks of worker and sink, ``load``, speculators' export."""

import json
import os

import numpy as np
import pytest

import eaglefeed
from eaglefeed.cli.main import main
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import FP8, SCALES, HiddenStatesError, check_file, read_header
from eaglefeed.dataset.state_files import e4m3
from eaglefeed.dataset.state_files import write as store_write
from tests.unit.dataset.states_support import HIDDEN, LAYERS, N, build, record


def states_of(shape, seed=0):
    """Residual-stream-like values: each layer its own magnitude, a few large outliers."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32) * np.float32([0.02, 1, 8, 40][:shape[1]])[:, None]
    values[:, :, 3] *= 30
    return values


def write(path, states, dtype=FP8, ids=None):
    ids = list(range(1, states.shape[0] + 1)) if ids is None else ids
    store_write.write_file(path, states=states, token_ids=ids, layer_ids=(1, 2, 3, 4)[:states.shape[1]],
                            num_hidden_layers=4, dtype=dtype)
    return ids


def test_a_token_costs_at_most_055_of_bf16_scales_included(tmp_path):
    states = states_of((300, 4, 128))
    write(tmp_path / "f.safetensors", states)
    write(tmp_path / "b.safetensors", states, dtype="bfloat16")
    fp8 = hidden_states.bytes_per_token(4, 128, FP8)
    bf16 = hidden_states.bytes_per_token(4, 128, "bfloat16")
    assert fp8 == 4 * 128 + 4 * 4 and fp8 / bf16 == pytest.approx(0.516, abs=1e-3)
    eight_b = hidden_states.bytes_per_token(4, 4096, FP8), hidden_states.bytes_per_token(4, 4096, "bfloat16")
    assert eight_b == (16_400, 32_768) and eight_b[0] / eight_b[1] < 0.501  # an 8B target, H = 4,096
    header = read_header(tmp_path / "f.safetensors")
    data = {name: end - begin for name, (_c, _s, begin, end) in header.tensors.items()}
    assert data == {"hidden_states": 300 * 4 * 128, SCALES: 300 * 4 * 4, "token_ids": 300 * 8}
    sizes = [os.path.getsize(tmp_path / name) for name in ("f.safetensors", "b.safetensors")]
    assert sizes[0] / sizes[1] < 0.55  # the whole files, header and token ids included


def test_the_workers_check_and_the_sinks_problem_take_fp8_files(tmp_path):
    states = states_of((20, 3, 16))
    path = tmp_path / hidden_states.STORE / "r.safetensors"
    ids = write(path, states)
    ref = check_file(path, token_ids=ids, layer_ids=(3, 1, 2), dtype=FP8)
    assert ref.dtype == FP8 and ref.shape == (20, 3, 16) and ref.bytes == os.path.getsize(path)
    assert hidden_states.problem(tmp_path, ref) is None
    with pytest.raises(HiddenStatesError, match="stored as float8_e4m3fn, the run asked for bfloat16"):
        check_file(path, token_ids=ids, layer_ids=None, dtype="bfloat16")
    raw = bytearray(path.read_bytes())
    raw[-len(ids) * 8 - 1] ^= 1  # a scale's byte (the scales sit before the ids)
    path.write_bytes(bytes(raw))
    assert hidden_states.problem(tmp_path, ref) == f"{ref.uri} does not match its sha256"


def test_an_fp8_file_without_its_scales_or_with_others_is_refused(tmp_path):
    codes, scales = e4m3.quantize(states_of((5, 2, 8)))
    meta = {"format": hidden_states.FORMAT, "layer_ids": "[1, 2]", "num_hidden_layers": "4", "dtype": FP8}
    ids = ("I64", np.arange(5, dtype=np.int64))
    path = tmp_path / "a.safetensors"
    store_write.write_tensors(path, {"hidden_states": ("F8_E4M3", codes), "token_ids": ids}, meta)
    with pytest.raises(HiddenStatesError, match=f"no {SCALES} tensor"):
        check_file(path, token_ids=range(5), layer_ids=None, dtype=None)
    store_write.write_tensors(path, {"hidden_states": ("F8_E4M3", codes), SCALES: ("F32", scales[:, :, 0]),
                                      "token_ids": ids}, meta)
    with pytest.raises(HiddenStatesError, match=rf"{SCALES} is F32 \[5, 2\], not F32 \[5, 2, 1\]"):
        check_file(path, token_ids=range(5), layer_ids=None, dtype=None)


def test_write_positions_keeps_an_fp8_files_codes_and_scales_exactly(tmp_path):
    states = states_of((12, 4, 16))
    source = tmp_path / hidden_states.STORE / "whole.safetensors"
    ids = write(source, states)
    dest = tmp_path / hidden_states.STORE / "part.safetensors"
    store_write.write_positions(source, dest, slice(5, None), start=5)
    part = check_file(dest, token_ids=ids[5:], layer_ids=None, dtype=FP8, start=5)
    whole = check_file(source, token_ids=ids, layer_ids=None, dtype=FP8)
    for read in (hidden_states.open_states, hidden_states.open_scales):
        assert np.array_equal(read(tmp_path, part), read(tmp_path, whole)[5:])


def test_load_gives_each_rows_states_in_their_shape_dequantized_on_access(tmp_path):
    build(tmp_path, rows=3, dtype=FP8)
    rows = eaglefeed.load(tmp_path, hidden_states=True)
    for i, row in enumerate(rows):
        _rec, values = record(tmp_path / "scratch", i, dtype="float32")  # the same seed: the same values
        states = row["hidden_states"]
        assert states.shape == values.shape == (len(row["input_ids"]) - 1, len(LAYERS), HIDDEN)
        assert states.raw.shape == values.shape and states.raw.dtype == np.uint8
        assert states.scales.shape == (*values.shape[:2], 1) and states.scales.dtype == np.float32
        got = states.float32()
        assert got.shape == values.shape and got.dtype == np.float32
        bound = np.maximum(np.abs(values) * 2.0**-4, states.scales * 2.0**-10) * (1 + 2.0**-20)
        assert (np.abs(got - values) <= bound).all()
        assert np.array_equal(states.float32(layer=N), got[:, LAYERS.index(N)])


def test_an_fp8_file_that_lost_its_scales_is_a_dataset_error_on_access(tmp_path):
    build(tmp_path, rows=1, dtype=FP8)
    [row] = eaglefeed.load(tmp_path, hidden_states=True)
    path = tmp_path / row["hidden_states"].ref.uri
    header = read_header(path)
    tensors = {name: (code, hidden_states.read_tensor(path, header, name).copy())
               for name, (code, *_rest) in header.tensors.items() if name != SCALES}
    store_write.write_tensors(path, tensors, header.metadata)
    with pytest.raises(DatasetError, match=f"without {SCALES}"):
        row["hidden_states"].float32()


def test_speculators_export_links_fp8_files_and_cuts_keep_their_scales(tmp_path, capsys):
    made = build(tmp_path / "d", rows=3, dtype=FP8, lengths={0: 2, 1: 9, 2: 5})
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out),
                 "--hidden-states", "--max-length", "8", "--length-policy", "truncate"]) == 0
    printed = capsys.readouterr().out
    assert "2 linked, 1 written" in printed and "float8_e4m3fn" in printed
    assert "--hidden-states-backend fp8" in printed
    rows = {tuple(r["input_ids"][:-1]): r for r in eaglefeed.load(tmp_path / "d", hidden_states=True)}
    for i in range(len(made)):
        theirs = out.parent / "hidden_states" / f"hs_{i}.safetensors"
        header = read_header(theirs)
        ids = hidden_states.read_tensor(theirs, header, "token_ids").tolist()
        (row,) = [r for key, r in rows.items() if list(key[:len(ids)]) == ids]
        codes = hidden_states.read_tensor(theirs, header, "hidden_states")
        scales = hidden_states.read_tensor(theirs, header, SCALES)
        assert header.tensors["hidden_states"][0] == "F8_E4M3" and header.metadata["dtype"] == FP8
        assert codes.shape == (len(ids), len(LAYERS), HIDDEN) and scales.shape == (len(ids), len(LAYERS), 1)
        assert np.array_equal(e4m3.dequantize(codes, scales), row["hidden_states"].float32()[:len(ids)])
    assert json.loads((out.parent / "state.json").read_text())["_format_type"] == "torch"
