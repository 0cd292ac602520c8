"""``tokens`` mode with a model that stops at the next message's role token (GLM-4.5's way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglefeed.chat.conversation import NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import PromptRenderer
from tests.toolcall_tokenizers import write_family_tokenizer

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "x": {"type": "string"}}}}}]
CALL_TEXT = "\n<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"
AFTER = [{"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "assistant", "content": "done"}]
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": "1"}}}


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory) -> PromptRenderer:
    folder: Path = write_family_tokenizer("glm45", tmp_path_factory.mktemp("glm") / "glm45")
    return PromptRenderer(str(folder))


def _step(glm: PromptRenderer, after: list[dict], output: str):  # type: ignore[no-untyped-def]
    row = {"tools": TOOLS, "messages": [{"role": "user", "content": "go"},
                                        {"role": "assistant", "content": "", "tool_calls": [CALL]}, *after]}
    first = start(parse_row(row, default_id="0"), mode="tokens", max_turns=4, lane=0, renderer=glm,
                  conversation_id="g")
    assert isinstance(first, NextPrompt)
    out = list(glm.tokenizer(output, add_special_tokens=False)["input_ids"])
    return first, out, continue_after(first.state, prompt_ids=first.input_ids, output_ids=out,
                                      finish_reason="stop", renderer=glm, tool_format="glm45")


def test_a_turn_that_stops_at_the_next_role_token_is_continued_after_it(glm):
    call, after = CALL_TEXT, AFTER
    first, out, step = _step(glm, after, call + "<|observation|>")
    assert isinstance(step, NextPrompt)
    assert step.input_ids[:len(first.input_ids) + len(out)] == first.input_ids + out
    rest = glm.tokenizer.decode(step.input_ids[len(first.input_ids) + len(out):], skip_special_tokens=False)
    assert rest.startswith("<tool_response>") and rest.endswith("<|assistant|>")


def test_a_stop_that_is_not_the_next_messages_opening_is_not_prefix_stable(glm):
    call, after = CALL_TEXT, AFTER
    _, _, step = _step(glm, after, call + "<|user|>")  # a tool result follows, not a user turn
    assert step.reason == "not_prefix_stable"
