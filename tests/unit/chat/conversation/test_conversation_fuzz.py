"""continue_after on arbitrary output ids: it always answers NextPrompt or Ended, never raises."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.conversation.reasons import REASONS
from eaglefeed.chat.prompts import parse_row

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
ROW = {"tools": [TOOL], "messages": [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {}}}]},
    {"role": "tool", "content": "rain"},
    {"role": "assistant", "content": "Rain."},
    {"role": "user", "content": "Thanks"}]}

# Ids of the demo tokenizer: its added tokens (0-8), newline and a few text pieces, plus the
# tokens of a well-formed call so that some examples pair and continue.
pieces = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 207, 300, 301, 1000, 2000, 4095])


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(pieces, max_size=25), st.booleans(), st.sampled_from(["rerender", "tokens"]),
       st.sampled_from(["stop", "length", "abort"]))
def test_any_output_gives_a_next_prompt_or_an_end(renderer, encode, ids, with_call, mode, finish):
    first = start(parse_row(ROW, default_id="0"), mode=mode, max_turns=8, lane=0, renderer=renderer,
                  conversation_id="f")
    assert isinstance(first, NextPrompt)
    output = ids + (encode('<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call><|im_end|>')
                    if with_call else [])
    step = continue_after(first.state, prompt_ids=first.input_ids, output_ids=output, finish_reason=finish,
                          renderer=renderer)
    if isinstance(step, Ended):
        assert step.outcome in ("complete", "truncated") and step.reason in REASONS
        assert step.turns_done == 1
        return
    assert finish == "stop"
    assert step.state.turn_index == 1 and step.state.position == 3
    if mode == "tokens":
        assert step.input_ids[:len(first.input_ids) + len(output)] == first.input_ids + output
