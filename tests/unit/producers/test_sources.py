"""Input readers: formats, folders, sidecars, stdin, positions."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.position import Position
from eaglefeed.producers.settings import FileOverrides
from eaglefeed.producers.sources import (
    InputFile,
    Mark,
    SourceRow,
    Unreadable,
    discover,
    read_jsonl,
    read_stdin,
    read_whole,
    unused_overrides,
)

ROW = {"messages": [{"role": "user", "content": "hi"}]}


def rows_and_marks(items):
    items = list(items)
    return [i for i in items if isinstance(i, SourceRow)], [i for i in items if isinstance(i, Mark)]


def test_discover_walks_folders_skips_hidden_files_and_sidecars(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ["d/a.jsonl", "d/sub/b.parquet", "d/c.json", "d/.partial.jsonl", "d/notes.txt",
                 "d/a.jsonl.overrides.json", "x.txt"]:
        (tmp_path / name).write_text("{}")
    found = discover([str(tmp_path / "d"), str(tmp_path / "x.txt"), str(tmp_path / "d" / "a.jsonl"), "-"])
    assert [(f.path.relative_to(tmp_path).as_posix(), f.kind) for f in found] == [
        ("d/a.jsonl", "jsonl"), ("d/c.json", "json"), ("d/sub/b.parquet", "parquet"), ("x.txt", "jsonl")]
    assert found[0].overrides == FileOverrides(template_kwargs={}, sampling={})
    with pytest.raises(ConfigError):
        discover([str(tmp_path / "missing.jsonl")])
    assert discover([str(tmp_path / "missing.jsonl")], missing_ok=True) == []


def test_sidecar_overrides_are_loaded_and_bad_ones_refused(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("")
    sidecar = tmp_path / "p.jsonl.overrides.json"
    sidecar.write_text(json.dumps({"sampling_params": {"temperature": 0.1},
                                   "chat_template_kwargs": {"enable_thinking": False}}))
    (file,) = discover([str(path)])
    assert file.overrides == FileOverrides(sampling={"temperature": 0.1},
                                           template_kwargs={"enable_thinking": False})
    for bad in ['{"sampling_params": {"temperature": "x"}}', '{"other": 1}', "not json"]:
        sidecar.write_text(bad)
        with pytest.raises(ConfigError, match="overrides"):
            discover([str(path)])


def test_jsonl_positions_and_partial_last_line(tmp_path):
    path = tmp_path / "a.jsonl"
    line = json.dumps(ROW).encode()
    path.write_bytes(line + b"\n\n" + line + b"\r\n" + line[:10])
    file = InputFile(path=path, kind="jsonl")
    rows, marks = rows_and_marks(read_jsonl(file, final=False))
    assert [r.line for r in rows] == [1, 3] and rows[1].raw == line
    assert marks[-1].state.offset == 2 * len(line) + 4 and marks[-1].state.line == 3
    assert sum(m.nbytes for m in marks) == marks[-1].state.offset
    rows, marks = rows_and_marks(read_jsonl(file, offset=marks[-1].state.offset, line=3, final=True))
    assert [(r.line, r.raw) for r in rows] == [(4, line[:10])]


def test_json_arrays_json_lines_in_a_json_file_and_broken_arrays(tmp_path):
    array = tmp_path / "a.json"
    array.write_text(json.dumps([ROW, ROW, 5]))
    rows, marks = rows_and_marks(read_whole(InputFile(path=array, kind="json")))
    assert [(r.line, r.value) for r in rows] == [(1, ROW), (2, ROW), (3, 5)]
    data = array.read_bytes()
    assert marks[0].state == Position(len(data), 3, hashlib.sha256(data).hexdigest())
    lines = tmp_path / "b.json"
    lines.write_text(json.dumps(ROW) + "\n" + json.dumps(ROW) + "\n")
    rows, _ = rows_and_marks(read_whole(InputFile(path=lines, kind="json")))
    assert [r.line for r in rows] == [1, 2] and rows[0].raw == json.dumps(ROW).encode()
    broken = tmp_path / "c.json"
    broken.write_text('[\n{"messages": []},\n{oops')
    rows, _ = rows_and_marks(read_whole(InputFile(path=broken, kind="json")))
    assert len(rows) == 1 and isinstance(rows[0].value, Unreadable)
    assert rows[0].value.reason == "invalid_json" and rows[0].line == 3
    obj = tmp_path / "d.json"
    obj.write_text('  {"not": "an array"}')
    (row,) = rows_and_marks(read_whole(InputFile(path=obj, kind="json")))[0]
    assert row.raw is not None  # a .json file not starting with [ is read as JSON Lines


def test_parquet_rows_lose_struct_nulls_and_unknown_columns(tmp_path):
    path = tmp_path / "p.parquet"
    table = pa.table({
        "messages": [[{"role": "user", "content": "a", "tool_calls": None}],
                     [{"role": "user", "content": "b", "tool_calls": None}]],
        "id": ["x", None],
        "irrelevant": [1, 2],
    })
    pq.write_table(table, path)
    rows, _ = rows_and_marks(read_whole(InputFile(path=path, kind="parquet")))
    assert [r.value for r in rows] == [{"messages": [{"role": "user", "content": "a"}], "id": "x"},
                                       {"messages": [{"role": "user", "content": "b"}]}]
    (tmp_path / "torn.parquet").write_bytes(path.read_bytes()[:40])
    rows, _ = rows_and_marks(read_whole(InputFile(path=tmp_path / "torn.parquet", kind="parquet")))
    assert [(r.line, r.value.reason) for r in rows] == [(1, "invalid_parquet")]


def test_stdin_reads_json_lines_or_one_array():
    line = json.dumps(ROW).encode()
    rows = list(read_stdin(io.BytesIO(line + b"\n\n" + line + b"\n")))
    assert [(r.source, r.line) for r in rows] == [("<stdin>", 1), ("<stdin>", 3)]
    rows = list(read_stdin(io.BytesIO(b"\n[" + line + b",\n" + line + b"]\n")))
    assert [(r.line, r.value) for r in rows] == [(1, ROW), (2, ROW)]


def test_source_names_are_valid_utf8(tmp_path):
    path = tmp_path / "caf\udce9.jsonl"  # how Python names a file whose name is not UTF-8
    assert InputFile(path=path, kind="jsonl").source.endswith("caf\ufffd.jsonl")


def unused(*inputs: str) -> list[Path]:
    return unused_overrides(inputs, files=discover(inputs, missing_ok=True))


@pytest.mark.parametrize("name", ["arr.overrides.json", "arr.json.overrides.json"])
def test_both_sidecar_names_apply(tmp_path, name):
    (tmp_path / "arr.json").write_text("[]")
    (tmp_path / name).write_text(json.dumps({"sampling_params": {"temperature": 0.2}}))
    [file] = discover([str(tmp_path / "arr.json")])
    assert file.overrides.sampling == {"temperature": 0.2}
    assert unused(str(tmp_path)) == []


def test_two_sidecars_for_one_input_are_refused(tmp_path):
    (tmp_path / "arr.json").write_text("[]")
    for name in ("arr.overrides.json", "arr.json.overrides.json"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(ConfigError, match="two overrides files"):
        discover([str(tmp_path)])


def test_an_overrides_file_that_matches_no_input_is_reported(tmp_path):
    (tmp_path / "arr.json").write_text("[]")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "arrr.overrides.json").write_text("{}")
    (tmp_path / "arr.jsn.overrides.json").write_text("{}")
    assert unused(str(tmp_path)) == [tmp_path / "arr.jsn.overrides.json",
                                     tmp_path / "sub" / "arrr.overrides.json"]
    assert unused(str(tmp_path / "arr.json")) == [tmp_path / "arr.jsn.overrides.json"]
