"""``export --lanes``: a ``tokens`` conversation lane as one row, its turns' files joined, cut as one."""

import json
import os

import numpy as np
import pytest

import eaglefeed
from eaglefeed.cli.main import main
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.export import export
from eaglefeed.dataset.export_states.rows import lane_rows_of, row_states
from eaglefeed.dataset.hidden_states import read_header, read_tensor, to_bfloat16, to_float32
from eaglefeed.dataset.lengths import LengthCut
from eaglefeed.dataset.snapshot import snapshot
from tests.unit.dataset.states_support import HIDDEN, LAYERS, build_lanes, lane_records, record, sink
from tests.unit.dataset.test_export_states import arrow_rows, tensors

LANES = {"c0": [4, 3, 5], "c1": [2, 6]}  # final turns of 19 and 13 ids; two plain rows of 8 before them


def export_dir(tmp_path, *flags, folder="train"):
    out = tmp_path / folder / "data.jsonl"
    out.parent.mkdir()
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out),
                 "--hidden-states", "--lanes", *flags]) == 0
    return out


def spans(mask):
    return sum(1 for i, bit in enumerate(mask) if bit and (i == 0 or not mask[i - 1]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_a_lane_is_one_row_of_its_final_ids_every_span_and_its_turns_states_joined_exactly(
        tmp_path, capsys, dtype):
    made = build_lanes(tmp_path / "d", LANES, dtype=dtype)
    out = export_dir(tmp_path)
    printed = capsys.readouterr().out
    assert "speculators hidden states: 4 rows (2 of them lanes of several turns, joined)" in printed
    assert "2 linked, 2 written" in printed and "2 of the rows are conversation lanes" in printed
    loaded = list(eaglefeed.load(tmp_path / "d", hidden_states=True, lanes=True))
    rows = arrow_rows(out.parent)
    assert len(rows) == len(loaded) == 4
    for i, (row, ours) in enumerate(zip(rows, loaded, strict=True)):
        states = ours["hidden_states"]
        positions = len(ours["input_ids"]) - 1
        assert row == {"input_ids": ours["input_ids"][:positions], "loss_mask": ours["loss_mask"][:positions],
                       "seq_len": positions}
        theirs = out.parent / "hidden_states" / f"hs_{i}.safetensors"
        if ours["turns"] == 1:  # a plain row's file, linked
            assert os.stat(theirs).st_ino == os.stat(tmp_path / "d" / states.ref.uri).st_ino
            continue
        assert spans(row["loss_mask"]) == ours["turns"] == len(LANES[ours["conversation_id"]])
        raw = _raw(theirs, dtype)
        assert raw["hidden_states"].shape == (positions, len(LAYERS), HIDDEN)
        assert np.array_equal(raw["hidden_states"], states.raw)  # the stored bits, joined: nothing converted
        assert raw["token_ids"].tolist() == row["input_ids"]
        if dtype == "float8_e4m3fn":  # speculators' FP8 file: codes and scales, each position's own
            assert np.array_equal(raw["hidden_states_scales"], states.scales)
    lines = [json.loads(line) for line in out.read_text().splitlines()]  # the token export: lanes too
    assert [line["id"] for line in lines] == [row["id"] for row in loaded]
    assert [line["loss_mask"] for line in lines] == [row["loss_mask"] for row in loaded]
    assert len(made) == 2 + 5


def _raw(path, dtype):
    """A store file's tensors as stored (fp8: the uint8 codes), read through its header."""
    header = read_header(path)
    return {name: np.asarray(read_tensor(path, header, name)) for name in header.tensors}


def test_without_lanes_the_token_export_has_a_row_per_turn_and_the_states_export_refuses_naming_lanes(
        tmp_path, capsys):
    build_lanes(tmp_path / "d", LANES)
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    with pytest.raises(DatasetError, match=r"3 rows are later turns .* pass --lanes"):
        export(tmp_path / "d", fmt="speculators", out=out, hidden_states={})
    assert list(out.parent.iterdir()) == []
    assert main(["export", str(tmp_path / "d"), "--format", "speculators", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2 + 5


def test_length_cuts_apply_to_the_joined_lane_its_loss_counted_on_every_span(tmp_path, capsys):
    build_lanes(tmp_path / "d", LANES)
    loaded = {row["id"]: row for row in eaglefeed.load(tmp_path / "d", hidden_states=True, lanes=True)}
    out = export_dir(tmp_path, "--max-length", "10", "--length-policy", "truncate")
    printed = capsys.readouterr().out
    # both lanes (19 and 13 ids) are cut to 10: c0 keeps 3-6 and 9 of 12 loss ids, c1 3-4 and 7-9 of 8
    assert "2 rows longer; 0 rows dropped" in printed
    assert "2 rows truncated (12 tokens cut, 10 of them loss tokens)" in printed
    rows = arrow_rows(out.parent)
    assert [row["seq_len"] for row in rows] == [7, 7, 10, 10]
    for i, row in enumerate(rows[2:], start=2):
        ours = next(r for r in loaded.values() if r["input_ids"][:10] == row["input_ids"])
        assert row["loss_mask"] == ours["loss_mask"][:10]
        got = tensors(out.parent / "hidden_states" / f"hs_{i}.safetensors")
        assert np.array_equal(got["hidden_states"], ours["hidden_states"].raw[:10])
    assert [json.loads(line)["seq_len"] for line in out.read_text().splitlines()] == [8, 8, 10, 10]

    out = export_dir(tmp_path, "--max-length", "15", "--length-policy", "drop", folder="dropped")
    printed = capsys.readouterr().out
    assert "1 rows dropped (19 tokens, 12 loss tokens)" in printed  # c0: 4 + 3 + 5 generated ids
    assert [row["seq_len"] for row in arrow_rows(out.parent)] == [7, 7, 12]
    for lanes, over in ((True, 2), (False, 3)):  # the lanes of 19 and 13 ids; as turns, one of 12 too
        with pytest.raises(DatasetError, match=rf"^{over} rows are longer than --max-length 11"):
            export(tmp_path / "d", fmt="speculators", out=tmp_path / "e.jsonl", max_length=11, policy="error",
                   lanes=lanes)
    assert not (tmp_path / "e.jsonl").exists()


def test_the_cut_counts_a_lanes_loss_on_its_mask_and_drops_a_lane_left_without_one():
    mask = np.array([0, 0, 1, 1, 0, 0, 1, 1, 1, 0])
    cut = LengthCut(max_length=5, policy="truncate")
    assert cut.apply("lane", 10, 8, mask) == 5
    assert (cut.cut_tokens, cut.cut_loss_tokens) == (5, 3)  # the mask's, not seq_len - prompt_len = 2
    assert cut.apply("early", 10, 8, np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 0])) == 0
    assert (cut.dropped_rows, cut.dropped_loss_tokens) == (1, 3)
    assert cut.apply("plain", 10, 8) == 0  # 0…0 1…1 from 8: nothing left of it under 5


def test_a_lane_missing_a_turns_file_has_no_states_and_specforge_gets_fp8_lanes_as_bf16(tmp_path):
    root = tmp_path / "d"
    whole, _ = lane_records(root, "c0", [4, 3], dtype="float8_e4m3fn", seed=1)
    broken, _ = lane_records(root, "c1", [2, 5], dtype="float8_e4m3fn", seed=2)
    del broken[1]["hidden_states"]
    sink(root, [record(root, 0, dtype="float8_e4m3fn")[0], *whole, *broken])
    with snapshot(root) as files:
        rows = {row.row_id: row for row in lane_rows_of(root, files)}
    assert rows["c1-t1:0"].refs == () and rows["c1-t1:0"].turns == 2
    lane = rows["c0-t1:0"]
    assert len(lane.refs) == 2 and lane.positions == len(lane.input_ids) - 1
    states, dtype = row_states(root, lane, 6)
    (ours,) = [r["hidden_states"] for r in eaglefeed.load(root, hidden_states=True, lanes=True)
               if r["id"] == "c0-t1:0"]
    assert dtype == "bfloat16"
    assert np.array_equal(states, to_bfloat16(to_float32(ours.raw, ours.refs[0].dtype, ours.scales))[:6])
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    with pytest.raises(DatasetError, match=r"1 rows have no hidden states \(first: c1-t1:0\)"):
        export(root, fmt="speculators", out=out, hidden_states={}, lanes=True)
    summary = export(root, fmt="speculators", out=out, hidden_states={"skip_missing": True}, lanes=True)
    assert (summary.states.rows, summary.states.missing, summary.states.lanes, summary.lanes) == (2, 1, 1, 2)
