"""``tokens`` mode refuses templates whose suffix is not token-stable; pairing details."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import PromptRenderer
from tests.unit.chat.conversation.conftest import DEMO_TOKENIZER

USER1 = {"role": "user", "content": "hi"}
USER2 = {"role": "user", "content": "again"}
ASSISTANT_CLOSE = "{{- '<|im_end|>\\n' -}}\n{%- elif message.role == 'tool' -%}"
ROW = {"messages": [USER1, {"role": "assistant", "content": "a"}, USER2]}


def _renderer_with(tmp_path: Path, old: str, new: str) -> PromptRenderer:
    """The demo tokenizer with one edit to its chat template."""
    folder = tmp_path / "tok"
    shutil.copytree(DEMO_TOKENIZER, folder)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    assert old in text
    template.write_text(text.replace(old, new), encoding="utf-8")
    return PromptRenderer(str(folder), fast=False)


def _one_step(renderer: PromptRenderer, mode: str, out: str, row: dict = ROW) -> NextPrompt | Ended:
    first = start(parse_row(row, default_id="0"), mode=mode, max_turns=4, lane=0, renderer=renderer,
                  conversation_id="c")
    assert isinstance(first, NextPrompt)
    output = list(renderer.tokenizer.encode(out, add_special_tokens=False))
    return continue_after(first.state, prompt_ids=first.input_ids, output_ids=output, finish_reason="stop",
                          renderer=renderer)


def test_a_closing_that_grows_when_messages_follow_is_a_suffix(tmp_path):
    # The last message ends without the newline; once a message follows, it gets one: the newline
    # is part of what follows, which is fine.
    renderer = _renderer_with(tmp_path, ASSISTANT_CLOSE,
                              "{{- '<|im_end|>' + ('' if loop.last else '\\n') -}}\n"
                              "{%- elif message.role == 'tool' -%}")
    step = _one_step(renderer, "tokens", "Sure.<|im_end|>")
    assert isinstance(step, NextPrompt)
    assert step.input_ids == list(renderer.tokenizer.apply_chat_template(
        [USER1, {"role": "assistant", "content": "Sure."}, USER2], add_generation_prompt=True, tokenize=True,
        return_dict=True)["input_ids"])


def test_a_closing_that_changes_when_messages_follow_is_not_prefix_stable(tmp_path):
    # This template ends the last message differently from the ones before it.
    renderer = _renderer_with(tmp_path, ASSISTANT_CLOSE,
                              "{{- '<|im_end|>' + ('\\n<|endoftext|>' if loop.last else '\\n') -}}\n"
                              "{%- elif message.role == 'tool' -%}")
    ended = _one_step(renderer, "tokens", "Sure.<|im_end|>")
    assert isinstance(ended, Ended)
    assert (ended.outcome, ended.reason, ended.turns_done) == ("truncated", "not_prefix_stable", 1)
    # rerender does not need the suffix: it renders the whole conversation.
    assert isinstance(_one_step(renderer, "rerender", "Sure.<|im_end|>"), NextPrompt)


def test_a_closing_that_merges_with_the_content_is_not_prefix_stable(tmp_path):
    # No special token after the content: the closing's first letters may merge with the last word.
    renderer = _renderer_with(tmp_path, ASSISTANT_CLOSE,
                              "{{- 'ing\\n' -}}\n{%- elif message.role == 'tool' -%}")
    ended = _one_step(renderer, "tokens", "Sure")
    assert isinstance(ended, Ended) and ended.reason == "not_prefix_stable"


def test_a_stop_token_the_template_does_not_close_with_is_not_guessed(renderer):
    ended = _one_step(renderer, "tokens", "Sure.<|endoftext|>")
    assert isinstance(ended, Ended) and ended.reason == "not_prefix_stable"


def test_a_template_error_truncates(tmp_path):
    renderer = _renderer_with(tmp_path, "{%- elif message.role == 'user' -%}",
                              "{%- elif message.role == 'user' and message.content == 'again' -%}"
                              "{{- raise_exception('no again') -}}\n{%- elif message.role == 'user' -%}")
    for mode in ("rerender", "tokens"):
        ended = _one_step(renderer, mode, "Sure.<|im_end|>")
        assert isinstance(ended, Ended) and ended.reason == "template_error"


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_the_cached_name_comes_from_the_source_call_its_id_names(mode, renderer):
    call = {"id": "c9", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    other = {"id": "c8", "type": "function", "function": {"name": "get_time", "arguments": {}}}
    row = {"messages": [USER1, {"role": "assistant", "content": "", "tool_calls": [other, call]},
                        {"role": "tool", "tool_call_id": "c9", "content": "snow"},
                        {"role": "assistant", "content": "x"}]}
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>'
    bad = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>'
    step = _one_step(renderer, mode, good, row)
    assert isinstance(step, NextPrompt)
    if mode == "rerender":
        sent = step.state.history[-2]
        assert sent["tool_calls"][0]["id"] == "c9" and step.state.history[-1]["tool_call_id"] == "c9"
    ended = _one_step(renderer, mode, bad, row)
    assert isinstance(ended, Ended) and ended.reason == "tool_call_mismatch"


def test_a_result_without_a_name_pairs_with_any_call(renderer):
    first = start(parse_row({"messages": [USER1, {"role": "assistant", "content": ""},
                                          {"role": "tool", "content": "snow"}]}, default_id="0"),
                  mode="rerender", max_turns=4, lane=0, renderer=renderer, conversation_id="c")
    assert isinstance(first, NextPrompt)
    text = '<tool_call>\n{"name": "anything", "arguments": {}}\n</tool_call><|im_end|>'
    out = renderer.tokenizer.encode(text, add_special_tokens=False)
    step = continue_after(first.state, prompt_ids=first.input_ids, output_ids=out, finish_reason="stop",
                          renderer=renderer)
    assert isinstance(step, NextPrompt) and step.state.position == 3
