"""Exactness: every prompt's ids are what the tokenizer's own apply_chat_template gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from eaglefeed.chat.render import PromptRenderer, RenderJob, tokenizer_files_hash
from eaglefeed.core.config import PromptSettings
from eaglefeed.core.errors import InputError
from eaglefeed.core.tokenizer.markers import THINK_END, THINK_START
from eaglefeed.devtools.demo import SPECIAL_TOKENS, TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.sources import SourceRow
from eaglefeed.schemas import PROMPT

THINK, END_THINK = SPECIAL_TOKENS.index(THINK_START), SPECIAL_TOKENS.index(THINK_END)  # demo tokenizer ids

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
CALL_AS_RENDERED = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": {"city": "Oslo"}}}
MULTI_TURN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
              {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy one."},
              {"role": "user", "content": "And of Japan?"}]

# (row, expected messages, expected tools, expected template kwargs); CLI kwargs are {"enable_thinking": True}
CASES = {
    "openai multi-turn, thinking on": (
        {"messages": [*MULTI_TURN, {"role": "assistant", "content": "Tokyo."}]}, MULTI_TURN, None,
        {"enable_thinking": True}),
    "openai multi-turn, thinking off": (
        {"messages": MULTI_TURN, "chat_template_kwargs": {"enable_thinking": False}}, MULTI_TURN, None,
        {"enable_thinking": False}),
    "openai tool call": (
        {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                      {"role": "assistant", "content": None, "tool_calls": [CALL],
                       "reasoning_content": "Look."},
                      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": TOOLS},
        [{"role": "user", "content": "Weather in Oslo?"},
         {"role": "assistant", "content": "", "tool_calls": [CALL_AS_RENDERED], "reasoning_content": "Look."},
         {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], TOOLS, {"enable_thinking": True}),
    "openai tool call, thinking off": (
        {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                      {"role": "assistant", "content": "", "tool_calls": [CALL]},
                      {"role": "tool", "content": "sunny"}], "tools": json.dumps(TOOLS),
         "chat_template_kwargs": '{"enable_thinking": false}'},
        [{"role": "user", "content": "Weather in Oslo?"},
         {"role": "assistant", "content": "", "tool_calls": [CALL_AS_RENDERED]},
         {"role": "tool", "content": "sunny"}], TOOLS, {"enable_thinking": False}),
    "sharegpt multi-turn": (
        {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                           {"from": "gpt", "value": "Hello!"}, {"from": "human", "value": "Name a color."},
                           {"from": "gpt", "value": "Red."}]},
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a color."}], None,
        {"enable_thinking": True}),
    "sharegpt tool call, thinking off": (
        {"tools": json.dumps(TOOLS), "chat_template_kwargs": {"enable_thinking": False}, "conversations": [
            {"from": "human", "value": "Weather in Oslo?"},
            {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Oslo"}}'},
            {"from": "observation", "value": "sunny"}]},
        [{"role": "user", "content": "Weather in Oslo?"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
         {"role": "tool", "content": "sunny"}], TOOLS, {"enable_thinking": False}),
}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


@pytest.fixture(scope="module")
def renderer():
    return PromptRenderer(str(TOKENIZER_DIR))


def builder(*, fast=None, **overrides):
    base = dict(tokenizer=str(TOKENIZER_DIR), chat_template_kwargs={"enable_thinking": True})
    return PromptBuilder(PromptSettings(**{**base, **overrides}), fast=fast)


def reference_ids(tokenizer, messages, tools, kwargs):
    encoded = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                            return_dict=True, **kwargs)
    return list(encoded["input_ids"])


def rows_of(cases):
    return [SourceRow("cases.jsonl", n, json.dumps(row).encode()) for n, (row, *_rest) in enumerate(cases, 1)]


def test_every_format_renders_exactly_like_apply_chat_template(tokenizer):
    result = builder().build(rows_of(CASES.values()))
    assert not result.rejected
    records = [PROMPT.decode(value) for _key, value, _n in result.prompts]
    for record, (name, (_row, messages, tools, kwargs)) in zip(records, CASES.items(), strict=True):
        assert record["input_ids"] == reference_ids(tokenizer, messages, tools, kwargs), name
        assert json.loads(record["chat_template_kwargs"]) == kwargs, name
        tail = record["input_ids"][-8:]
        # With thinking off, the template's empty think block is part of the prompt.
        assert (THINK in tail and END_THINK in tail) == (kwargs == {"enable_thinking": False}), name


def test_ids_are_stable_across_runs_and_equal_on_the_exact_path():
    rows = rows_of(CASES.values())
    fast, again, exact = builder(), builder(), builder(fast=False)
    assert fast.renderer.fast and not exact.renderer.fast

    def strip(result):
        return [(key, {**PROMPT.decode(value), "created_at": 0}) for key, value, _n in result.prompts]

    assert strip(fast.build(rows)) == strip(again.build(rows)) == strip(exact.build(rows))


def test_all_turns_renders_each_turn_with_the_templates_own_history(tokenizer):
    last = {"role": "assistant", "content": "Tokyo.", "reasoning_content": "Known."}
    row = {"messages": [*MULTI_TURN, last]}
    result = builder(turns="all").build(rows_of([(row,)]))
    records = [PROMPT.decode(value) for _key, value, _n in result.prompts]
    assert [r["turn_index"] for r in records] == [0, 1]
    thinking = {"enable_thinking": True}
    assert records[0]["input_ids"] == reference_ids(tokenizer, MULTI_TURN[:2], None, thinking)
    assert records[1]["input_ids"] == reference_ids(tokenizer, MULTI_TURN, None, thinking)
    assert len({r["prompt_id"] for r in records}) == 2


_text = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["<|im_end|>", "<think>", " </think>\n", "\r\n\t ", "東京 😀", ""])
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]),
                                  "content": _text})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations=st.lists(st.lists(_message, min_size=1, max_size=4), min_size=1, max_size=6),
       thinking=st.sampled_from([{}, {"enable_thinking": False}]), with_tools=st.booleans())
def test_batched_rendering_matches_one_at_a_time(renderer, conversations, thinking, with_tools):
    tools = TOOLS if with_tools else None
    jobs = [RenderJob(messages=c, tools=tools, template_kwargs=thinking, group=0) for c in conversations]
    assert renderer.fast
    assert renderer.render_many(jobs) == [
        renderer.render(c, tools=tools, template_kwargs=thinking) for c in conversations]


def test_one_failing_conversation_does_not_fail_its_batch(renderer):
    good = [{"role": "user", "content": "hi"}]
    jobs = [RenderJob(messages=m, tools=None, template_kwargs={}, group=0)
            for m in (good, [{"role": "wizard", "content": "x"}], good)]
    out = renderer.render_many(jobs)
    assert out[0] == out[2] == renderer.render(good, tools=None, template_kwargs={})
    assert isinstance(out[1], InputError) and out[1].reason == "template_error"


def test_the_probe_refuses_a_fast_path_that_differs(renderer, monkeypatch):
    real = renderer._tokenize
    monkeypatch.setattr(renderer, "_tokenize", lambda texts: [ids + [0] for ids in real(texts)])
    assert renderer._probe() is False
    renderer.fast = False
    job = RenderJob(messages=[{"role": "user", "content": "hi"}], tools=None, template_kwargs={}, group=0)
    assert renderer.render_many([job]) == [renderer.render(job.messages, tools=None, template_kwargs={})]
    monkeypatch.undo()
    assert renderer._probe() is True


def test_reserved_template_kwargs_are_refused():
    row = {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"max_length": 3}}
    result = builder().build(rows_of([(row,)]))
    assert [r.reason for r in result.rejected] == ["invalid_value"]


def test_tokenizer_hash_covers_the_tokenizer_files(tmp_path, renderer):
    for f in TOKENIZER_DIR.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    assert tokenizer_files_hash(str(tmp_path), b"") == renderer.tokenizer_hash
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 7}))
    assert tokenizer_files_hash(str(tmp_path), b"") != renderer.tokenizer_hash


def test_a_missing_tokenizer_path_is_one_clear_line(tmp_path):
    from eaglefeed.chat.render import PromptRenderer
    from eaglefeed.core.errors import ConfigError

    missing = tmp_path / "no" / "such" / "tokenizer"
    with pytest.raises(ConfigError) as exc:
        PromptRenderer(str(missing))
    assert str(exc.value) == f"no tokenizer at {missing} (not a directory, and not a model id)"
    with pytest.raises(ConfigError, match=r"^cannot load the tokenizer in "):
        PromptRenderer(str(tmp_path))  # a folder without tokenizer files
