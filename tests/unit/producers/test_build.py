"""The builder: every row ends as a record, a rejection with a reason, or a skip; never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eaglefeed.core.config import PromptSettings, SamplingDefaults
from eaglefeed.core.errors import ConfigError
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.settings import FileOverrides
from eaglefeed.producers.sources import SourceRow, Unreadable
from eaglefeed.schemas import PROMPT

GOOD = {"messages": [{"role": "user", "content": "hello"}]}

BAD_LINES = {
    b"{not json": "invalid_json",
    b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}': "invalid_utf8",
    b"[1, 2]": "wrong_type",
    b'{"prompt": "hi"}': "no_messages",
    b'{"messages": []}': "empty_conversation",
    b'{"conversations": []}': "empty_conversation",
    b'{"messages": [{"role": "wizard", "content": "x"}]}': "unknown_role",
    b'{"conversations": [{"from": "bot", "value": "x"}]}': "unknown_role",
    b'{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}':
        "no_user_turn",
    b'{"messages": [{"role": "user", "content": "' + b"word " * 400 + b'"}]}': "prompt_too_long",
    b'{"messages": [{"role": "user", "content": {"text": "x"}}]}': "wrong_type",
    b'{"messages": [{"role": "user", "content": "x"}], "sampling_params": {"top_k": 0}}': "invalid_value",
    b'{"messages": [{"role": "user", "content": "x\\udc00"}]}': "invalid_utf8",
    b'{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tokenize": false}}':
        "invalid_value",
    b'{"a": ' * 100000 + b"1" + b"}" * 100000: "invalid_json",
}


@pytest.fixture(scope="module")
def builder():
    return PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), max_prompt_tokens=200))


def rows(*lines: bytes, overrides=None) -> list[SourceRow]:
    extra = {"overrides": overrides} if overrides else {}
    return [SourceRow("in.jsonl", n, line, **extra) for n, line in enumerate(lines, 1)]


def test_every_bad_line_is_rejected_with_its_reason_and_the_good_ones_survive(builder):
    lines = [json.dumps(GOOD).encode(), *BAD_LINES, json.dumps(GOOD).encode()]
    result = builder.build(rows(*lines))
    assert len(result.prompts) == 2
    assert sorted((r.line, r.reason) for r in result.rejected) == [
        (n, reason) for n, reason in enumerate(BAD_LINES.values(), 2)]
    for bad in result.rejected:
        assert bad.source == "in.jsonl" and bad.message
        assert bad.raw == lines[bad.line - 1][:65536]


def test_each_line_that_became_a_prompt_names_its_first_prompt_id(builder):
    """How the publisher sees a line it dead-lettered before published now (producers/fixes.py)."""
    other = {"messages": [{"role": "user", "content": "another"}]}
    result = builder.build(rows(json.dumps(GOOD).encode(), b"{not json", json.dumps(other).encode()))
    assert result.lines == {("in.jsonl", 1): result.prompts[0][0].decode(),
                            ("in.jsonl", 3): result.prompts[1][0].decode()}


def test_rows_the_reader_could_not_decode_are_rejected_with_the_readers_reason(builder):
    row = SourceRow("x.parquet", 7, None, Unreadable("invalid_parquet", "torn file"))
    result = builder.build([row, SourceRow("x.parquet", 8, None, GOOD)])
    assert [(r.line, r.reason, r.message) for r in result.rejected] == [(7, "invalid_parquet", "torn file")]
    assert len(result.prompts) == 1


def test_overrides_layer_cli_then_file_then_row():
    b = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR),
                                     chat_template_kwargs={"enable_thinking": True}))
    file = FileOverrides(sampling={"temperature": 0.2, "top_k": 5},
                         template_kwargs={"enable_thinking": False})
    row = {**GOOD, "sampling_params": {"top_k": 7}}
    result = b.build(rows(json.dumps(row).encode(), json.dumps(GOOD).encode(), overrides=file) + rows(
        json.dumps(GOOD).encode()))
    first, second, plain = (PROMPT.decode(v) for _k, v, _n in result.prompts)
    assert (first["sampling_params"]["temperature"], first["sampling_params"]["top_k"]) == (0.2, 7)
    assert (second["sampling_params"]["temperature"], second["sampling_params"]["top_k"]) == (0.2, 5)
    assert json.loads(second["chat_template_kwargs"]) == {"enable_thinking": False}
    assert plain["sampling_params"]["top_k"] == SamplingDefaults.top_k
    assert json.loads(plain["chat_template_kwargs"]) == {"enable_thinking": True}
    assert len({first["prompt_id"], second["prompt_id"], plain["prompt_id"]}) == 3


def test_bad_command_line_settings_are_a_config_error():
    with pytest.raises(ConfigError):
        PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), chat_template_kwargs={"tokenize": True}))
    with pytest.raises(ConfigError):
        PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), sampling=SamplingDefaults(top_k=0)))


def write_dataset(root: Path, prompt_ids: list[str]) -> None:
    (root / "segments").mkdir(parents=True)
    table = pa.table({"id": [f"{p}:{i}" for i, p in enumerate(prompt_ids)], "prompt_id": prompt_ids})
    pq.write_table(table, root / "segments" / "a.parquet")
    pq.write_table(table, root / "segments" / "stale.parquet")  # not in the manifest: ignored
    event = {"added": [{"path": "segments/a.parquet", "rows": 2}]}
    (root / "manifest.jsonl").write_text(json.dumps(event) + "\n")


def test_skip_done_skips_prompts_with_enough_samples_in_the_dataset(builder, tmp_path):
    lines = [json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}).encode() for i in range(3)]
    ids = [key.decode() for key, _v, _n in builder.build(rows(*lines)).prompts]
    write_dataset(tmp_path / "ds", [ids[0], ids[1], ids[1]])
    one = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), max_prompt_tokens=200,
                                      skip_done=tmp_path / "ds"))
    result = one.build(rows(*lines))
    assert result.skipped_done == 2 and [k.decode() for k, _v, _n in result.prompts] == [ids[2]]
    two = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), max_prompt_tokens=200, samples=2,
                                      skip_done=tmp_path / "ds"))
    result = two.build(rows(*lines))
    assert result.skipped_done == 1 and [k.decode() for k, _v, _n in result.prompts] == [ids[0], ids[2]]


def test_skip_done_needs_a_dataset(tmp_path):
    with pytest.raises(ConfigError):
        PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), skip_done=tmp_path))


def test_a_relative_local_tokenizer_is_recorded_absolute_and_ids_do_not_change(tmp_path, monkeypatch):
    # issue 27: a worker started in another directory could not load "./tokenizer".
    line = json.dumps(GOOD).encode()
    given = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR))).build(rows(line)).prompts[0]
    monkeypatch.chdir(TOKENIZER_DIR.parent)
    relative = PromptSettings(tokenizer=TOKENIZER_DIR.name)
    assert relative.tokenizer == str(TOKENIZER_DIR.absolute())
    key, value, _n = PromptBuilder(relative).build(rows(line)).prompts[0]
    assert PROMPT.decode(value)["tokenizer_id"] == str(TOKENIZER_DIR.absolute())
    assert key == given[0]  # the prompt id depends on the tokenizer's files, not on how it is named
    monkeypatch.chdir(tmp_path)
    assert PromptSettings(tokenizer="Qwen/Qwen3-8B").tokenizer == "Qwen/Qwen3-8B"  # a hub id: as given
    assert PromptSettings(tokenizer="missing/dir").tokenizer == "missing/dir"
