"""start/continue_after on 3-turn conversations with reasoning and tool calls, in both history modes.

Each expected prompt is rendered here, independently, with ``apply_chat_template`` from messages
written out by hand; the library's ids must equal them.
"""

from __future__ import annotations

from typing import Any

import pytest

from eaglefeed.chat.conversation import (
    ConversationState,
    Ended,
    NextPrompt,
    continue_after,
    first_messages,
    start,
)
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import RenderJob
from eaglefeed.core.errors import InputError

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


SYSTEM = {"role": "system", "content": "You are terse."}
USER1 = {"role": "user", "content": "Weather in Paris?"}
USER2 = {"role": "user", "content": "And should I take an umbrella?"}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
RESULT = {"role": "tool", "name": "get_weather", "content": "rain, 12C"}

# Source row: the dataset's own assistant turns differ from what the model will write.
ROW = {"id": "w1", "tools": [WEATHER_TOOL, TIME_TOOL], "messages": [
    SYSTEM, USER1,
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    RESULT,
    {"role": "assistant", "content": "Rainy, 12C (dataset answer)."},
    USER2,
    {"role": "assistant", "content": "Yes (dataset answer)."}]}

# What the model writes at each turn (the stand-in or an engine returns ids; these are texts).
OUT0 = ('<think>\nThe user wants weather; call the tool.\n</think>\n\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')
OUT1 = '<think>\nIt rains.\n</think>\n\nIt is raining in Paris, 12C.<|im_end|>'
OUT2 = '<think>\nRain means umbrella.\n</think>\n\nYes, take one.<|im_end|>'

ASSISTANT0 = {"role": "assistant", "content": "",
              "reasoning_content": "The user wants weather; call the tool.", "tool_calls": [CALL]}
ASSISTANT1 = {"role": "assistant", "content": "It is raining in Paris, 12C.",
              "reasoning_content": "It rains."}


def _conv(row: dict[str, Any] = ROW) -> Any:
    return parse_row(row, default_id="0")


def _step(prompt: NextPrompt, output: list[int], renderer: Any, finish: str = "stop") -> NextPrompt | Ended:
    return continue_after(prompt.state, prompt_ids=prompt.input_ids, output_ids=output,
                          finish_reason=finish, renderer=renderer)


def _run(mode: str, outputs: list[str], renderer: Any, encode: Any, row: dict[str, Any] = ROW,
         max_turns: int = 16) -> tuple[list[NextPrompt], Ended]:
    first = start(_conv(row), mode=mode, max_turns=max_turns, lane=0, renderer=renderer, conversation_id="c1")
    assert isinstance(first, NextPrompt)
    prompts = [first]
    for text in outputs:
        step = _step(prompts[-1], encode(text), renderer)
        if isinstance(step, Ended):
            return prompts, step
        prompts.append(step)
    raise AssertionError("the conversation did not end")


def test_rerender_three_turns_equal_an_independent_rendering(renderer, encode, render_ids):
    prompts, ended = _run("rerender", [OUT0, OUT1, OUT2], renderer, encode)
    tools = ROW["tools"]
    assert [p.input_ids for p in prompts] == [
        render_ids([SYSTEM, USER1], tools),
        render_ids([SYSTEM, USER1, ASSISTANT0, RESULT], tools),
        render_ids([SYSTEM, USER1, ASSISTANT0, RESULT, ASSISTANT1, USER2], tools),
    ]
    assert ended == Ended("complete", "user_turns_done", 3)
    # The template drops the earlier reasoning once a user message follows (as at inference).
    assert "The user wants weather" not in renderer.tokenizer.decode(prompts[2].input_ids)
    assert [p.state.turn_index for p in prompts] == [0, 1, 2]
    assert [p.state.position for p in prompts] == [2, 4, 6]


def test_tokens_three_turns_are_prompt_plus_output_plus_the_template_suffix(renderer, encode, render_ids):
    prompts, ended = _run("tokens", [OUT0, OUT1, OUT2], renderer, encode)
    tools = ROW["tools"]
    assert prompts[0].input_ids == render_ids([SYSTEM, USER1], tools)
    tool_turn = encode("\n<|im_start|>user\n<tool_response>\nrain, 12C\n</tool_response><|im_end|>\n"
                       "<|im_start|>assistant\n")
    assert prompts[1].input_ids == prompts[0].input_ids + encode(OUT0) + tool_turn
    # Here the model wrote exactly what the template renders for that history (reasoning kept after
    # the last user message), so the exact-token prompt is also the full rendering.
    assert prompts[1].input_ids == render_ids([SYSTEM, USER1, ASSISTANT0, RESULT], tools)
    user_turn = encode("\n<|im_start|>user\nAnd should I take an umbrella?<|im_end|>\n"
                       "<|im_start|>assistant\n")
    assert prompts[2].input_ids == prompts[1].input_ids + encode(OUT1) + user_turn
    # Unlike rerender, the earlier reasoning stays: the ids are what the model saw and wrote.
    assert "The user wants weather" in renderer.tokenizer.decode(prompts[2].input_ids)
    assert ended == Ended("complete", "user_turns_done", 3)
    assert all(p.state.history == [] for p in prompts)


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_call_that_does_not_match_the_cached_result_truncates(mode, renderer, encode):
    wrong = ('<think>\nx\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n'
             '</tool_call><|im_end|>')
    prompts, ended = _run(mode, [wrong], renderer, encode)
    assert len(prompts) == 1
    assert (ended.outcome, ended.reason, ended.turns_done) == ("truncated", "tool_call_mismatch", 1)


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
@pytest.mark.parametrize("body", ['{"name": get_weather}', '{"arguments": {}}', '[1, 2]', ''])
def test_an_unparsable_call_truncates(mode, body, renderer, encode):
    out = f"<tool_call>\n{body}\n</tool_call><|im_end|>"
    _, ended = _run(mode, [out], renderer, encode)
    assert (ended.outcome, ended.reason) == ("truncated", "tool_call_unparsable")


@pytest.mark.parametrize("out", ['<tool_call>\n{"name": "get_weather", "arguments": {}}<|im_end|>',
                                 'text</tool_call><|im_end|>'])
def test_unbalanced_call_tags_truncate(out, renderer, encode):
    _, ended = _run("rerender", [out], renderer, encode)
    assert ended.reason == "tool_call_unparsable"


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_two_calls_for_one_cached_result_mismatch(mode, renderer, encode):
    # Parallel calls pair in order with as many cached results (test_conversation_parallel.py); here
    # the source cached one result for two calls.
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    _, ended = _run(mode, [f"{call}\n{call}<|im_end|>"], renderer, encode)
    assert (ended.reason, ended.turns_done) == ("tool_call_mismatch", 1)
    assert ended.detail.startswith("the turn made 2 call(s) ['get_weather', 'get_weather'] but the source "
                                   "has 1")


def test_a_call_the_source_has_no_result_for_truncates(renderer, encode):
    row = {"messages": [USER1, {"role": "assistant", "content": "no idea"}, USER2]}
    _, ended = _run("rerender", [OUT0], renderer, encode, row=row)
    assert ended.reason == "tool_call_without_result"


def test_an_answer_where_the_source_called_a_tool_truncates(renderer, encode):
    _, ended = _run("rerender", [OUT1], renderer, encode)
    assert ended.reason == "tool_result_without_call"


def test_a_call_at_the_last_turn_has_no_result(renderer, encode):
    row = {"messages": [USER1]}
    _, ended = _run("tokens", [OUT0], renderer, encode, row=row)
    assert (ended.reason, ended.turns_done) == ("tool_call_without_result", 1)


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_length_ends_the_conversation(mode, renderer, encode):
    first = start(_conv(), mode=mode, max_turns=16, lane=0, renderer=renderer, conversation_id="c")
    assert isinstance(first, NextPrompt)
    ended = _step(first, encode("<think>\nlong"), renderer, finish="length")
    assert ended == Ended("truncated", "length", 1, "the turn hit max_new_tokens")
    assert _step(first, encode(OUT0), renderer, finish="abort").reason == "unknown_finish_reason"


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
@pytest.mark.parametrize(("max_turns", "made"), [(1, 1), (2, 2)])
def test_max_turns(mode, max_turns, made, renderer, encode):
    prompts, ended = _run(mode, [OUT0, OUT1, OUT2], renderer, encode, max_turns=max_turns)
    assert len(prompts) == made
    assert (ended.outcome, ended.reason, ended.turns_done) == ("truncated", "max_turns", made)


def test_max_turns_equal_to_the_user_turns_still_completes(renderer, encode):
    _, ended = _run("rerender", [OUT0, OUT1, OUT2], renderer, encode, max_turns=3)
    assert ended == Ended("complete", "user_turns_done", 3)


def test_a_single_turn_row_completes_after_one_turn(renderer, encode):
    _, ended = _run("tokens", [OUT1], renderer, encode, row={"messages": [SYSTEM, USER1]})
    assert ended == Ended("complete", "user_turns_done", 1)


def test_the_first_prompt_keeps_system_messages_and_stops_at_the_first_assistant(renderer, render_ids):
    row = {"messages": [SYSTEM, USER1, USER2, {"role": "assistant", "content": "a"}]}
    first = start(_conv(row), mode="rerender", max_turns=4, lane=2, renderer=renderer, conversation_id="c")
    assert isinstance(first, NextPrompt)
    assert first.input_ids == render_ids([SYSTEM, USER1, USER2])
    assert (first.state.lane, first.state.position, first.state.history) == (2, 3, [SYSTEM, USER1, USER2])


@pytest.mark.parametrize(("messages", "reason"), [
    ([{"role": "assistant", "content": "hi"}, USER1], "assistant_first"),
    ([SYSTEM, {"role": "assistant", "content": "hi"}, USER1], "assistant_first"),
    ([SYSTEM], "no_user_turn"),
])
def test_rows_that_cannot_start_are_input_errors(messages, reason, renderer):
    with pytest.raises(InputError) as caught:
        start(_conv({"messages": messages}), mode="tokens", max_turns=4, lane=0, renderer=renderer,
              conversation_id="c")
    assert caught.value.reason == reason


def test_start_takes_ids_rendered_in_a_batch(renderer):
    conv = _conv()
    messages = first_messages(conv)
    assert messages == [SYSTEM, USER1]
    (batched,) = renderer.render_many([RenderJob(messages=messages, tools=conv.tools,
                                                 template_kwargs=conv.template_kwargs, group=0)])
    alone = start(conv, mode="tokens", max_turns=4, lane=0, renderer=renderer, conversation_id="c")
    given_ids = start(conv, mode="tokens", max_turns=4, lane=0, renderer=renderer, conversation_id="c",
                      input_ids=batched)
    assert given_ids == alone


def test_bad_arguments_are_caller_bugs(renderer):
    with pytest.raises(ValueError, match="history mode"):
        start(_conv(), mode="original", max_turns=4, lane=0, renderer=renderer, conversation_id="c")
    with pytest.raises(ValueError, match="max_turns"):
        start(_conv(), mode="tokens", max_turns=0, lane=0, renderer=renderer, conversation_id="c")


def test_an_unknown_tool_format_truncates(renderer, encode):
    first = start(_conv(), mode="rerender", max_turns=4, lane=0, renderer=renderer, conversation_id="c")
    assert isinstance(first, NextPrompt)
    ended = continue_after(first.state, prompt_ids=first.input_ids, output_ids=encode(OUT0),
                           finish_reason="stop", renderer=renderer, tool_format="mistral_v99")
    assert ended.reason == "tool_call_unknown_format"


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_step_is_deterministic_and_its_state_survives_json(mode, renderer, encode):
    prompts, _ = _run(mode, [OUT0, OUT1, OUT2], renderer, encode)
    for prompt in prompts:
        again = ConversationState.from_json(prompt.state.to_json())
        assert again == prompt.state
    replay = _step(prompts[0], encode(OUT0), renderer)
    assert replay == prompts[1]


def test_tokens_mode_without_a_stop_token_appends_the_whole_closing(renderer, encode):
    # A stop string ends the turn without the end-of-turn token: the template's closing follows.
    first = start(_conv({"messages": [USER1, {"role": "assistant", "content": "a"}, USER2]}), mode="tokens",
                  max_turns=4, lane=0, renderer=renderer, conversation_id="c")
    assert isinstance(first, NextPrompt)
    out = encode("Sunny.")
    step = _step(first, out, renderer)
    assert isinstance(step, NextPrompt)
    assert step.input_ids == first.input_ids + out + encode(
        "<|im_end|>\n<|im_start|>user\nAnd should I take an umbrella?<|im_end|>\n<|im_start|>assistant\n")


def test_tokens_mode_with_thinking_disabled_keeps_the_template_kwargs(renderer, encode, render_ids):
    row = {"messages": [USER1, {"role": "assistant", "content": "a"}, USER2],
           "chat_template_kwargs": {"enable_thinking": False}}
    prompts, _ = _run("tokens", ["Sunny.<|im_end|>", "Yes.<|im_end|>"], renderer, encode, row=row)
    assert prompts[0].input_ids == render_ids([USER1], enable_thinking=False)
    assert prompts[1].input_ids[-len(encode("<think>\n\n</think>\n\n")):] == encode("<think>\n\n</think>\n\n")
