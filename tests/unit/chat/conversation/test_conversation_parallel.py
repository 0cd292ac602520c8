"""Parallel calls: N calls of one turn pair in order with the next N cached results, in both modes.

Expected prompts are rendered here, independently, with ``apply_chat_template`` from messages
written out by hand (or, in the property, from the generated calls and results).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.conversation.reasons import PARALLEL_TOOL_CALLS, REASONS
from eaglefeed.chat.prompts import parse_row

USER1 = {"role": "user", "content": "Weather and time in Paris?"}
USER2 = {"role": "user", "content": "Thanks. Umbrella?"}


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _fn(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    return call


def _row(source_calls: list[dict[str, Any]], results: list[dict[str, Any]],
         names: list[str]) -> dict[str, Any]:
    return {"tools": [_tool(n) for n in dict.fromkeys(names)], "messages": [
        USER1, {"role": "assistant", "content": "", "tool_calls": source_calls}, *results,
        {"role": "assistant", "content": "Rain, 12C, 14:00 (dataset answer)."}, USER2,
        {"role": "assistant", "content": "Yes (dataset answer)."}]}


def _output(calls: list[tuple[str, dict[str, Any]]]) -> str:
    blocks = [f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls]
    return "\n".join(blocks) + "<|im_end|>"


CITY = {"city": "Paris"}
TWO = [("get_weather", CITY), ("get_time", CITY)]
BOTH = ["get_weather", "get_time"]
NAMED = [{"role": "tool", "name": "get_weather", "content": "rain, 12C"},
         {"role": "tool", "name": "get_time", "content": "14:00"}]
ROW = _row([_fn("get_weather", CITY), _fn("get_time", CITY)], NAMED, ["get_weather", "get_time"])


def _first(row: dict[str, Any], mode: str, renderer: Any) -> NextPrompt:
    first = start(parse_row(row, default_id="0"), mode=mode, max_turns=8, lane=0, renderer=renderer,
                  conversation_id="p")
    assert isinstance(first, NextPrompt)
    return first


def _step(row: dict[str, Any], mode: str, text: str, renderer: Any,
          encode: Any) -> tuple[NextPrompt, NextPrompt | Ended]:
    first = _first(row, mode, renderer)
    step = continue_after(first.state, prompt_ids=first.input_ids, output_ids=encode(text),
                          finish_reason="stop", renderer=renderer)
    return first, step


def test_two_calls_pair_in_order_and_rerender_equals_an_independent_rendering(renderer, encode, render_ids):
    _, step = _step(ROW, "rerender", _output(TWO), renderer, encode)
    assert isinstance(step, NextPrompt)
    assistant = {"role": "assistant", "content": "",
                 "tool_calls": [_fn("get_weather", CITY), _fn("get_time", CITY)]}
    assert step.input_ids == render_ids([USER1, assistant, *NAMED], ROW["tools"])
    assert step.state.history == [USER1, assistant, *NAMED]
    assert (step.state.turn_index, step.state.position) == (1, 4)


def test_two_calls_in_tokens_mode_append_both_cached_results(renderer, encode):
    first, step = _step(ROW, "tokens", _output(TWO), renderer, encode)
    assert isinstance(step, NextPrompt)
    assert step.input_ids == first.input_ids + encode(_output(TWO)) + encode(
        "\n<|im_start|>user\n<tool_response>\nrain, 12C\n</tool_response>\n"
        "<tool_response>\n14:00\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_parallel_call_conversation_completes(renderer, mode, encode):
    first = _first(ROW, mode, renderer)
    outputs = [_output(TWO), "Rain, 12C, it is 14:00.<|im_end|>", "Yes.<|im_end|>"]
    step: NextPrompt | Ended = first
    for text in outputs:
        assert isinstance(step, NextPrompt)
        step = continue_after(step.state, prompt_ids=step.input_ids, output_ids=encode(text),
                              finish_reason="stop", renderer=renderer)
    assert step == Ended("complete", "user_turns_done", 3)


def test_ids_link_results_to_calls_and_enter_the_history(renderer, encode, render_ids):
    results = [{"role": "tool", "tool_call_id": "c1", "content": "rain"},
               {"role": "tool", "tool_call_id": "c2", "content": "14:00"}]
    row = _row([_fn("get_weather", CITY, "c1"), _fn("get_time", CITY, "c2")], results, BOTH)
    _, step = _step(row, "rerender", _output(TWO), renderer, encode)
    assert isinstance(step, NextPrompt)
    assistant = {"role": "assistant", "content": "",
                 "tool_calls": [_fn("get_weather", CITY, "c1"), _fn("get_time", CITY, "c2")]}
    assert step.input_ids == render_ids([USER1, assistant, *results], row["tools"])


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_calls_in_another_order_than_the_results_mismatch(renderer, mode, encode):
    _, ended = _step(ROW, mode, _output(TWO[::-1]), renderer, encode)
    assert isinstance(ended, Ended)
    assert (ended.outcome, ended.reason, ended.turns_done) == ("truncated", "tool_call_mismatch", 1)
    assert ended.detail == "call 0 of 2 is 'get_time' but cached result 0 is for 'get_weather'"


def test_a_name_known_only_through_the_call_id_is_checked(renderer, encode):
    # The source's calls are listed in the other order: the id, not the position, names the result.
    results = [{"role": "tool", "tool_call_id": "c1", "content": "rain"},
               {"role": "tool", "tool_call_id": "c2", "content": "14:00"}]
    row = _row([_fn("get_time", CITY, "c2"), _fn("get_weather", CITY, "c1")], results, BOTH)
    _, paired = _step(row, "tokens", _output(TWO), renderer, encode)
    assert isinstance(paired, NextPrompt)
    _, ended = _step(row, "tokens", _output(TWO[::-1]), renderer, encode)
    assert isinstance(ended, Ended) and ended.reason == "tool_call_mismatch"
    assert "call 0 of 2 is 'get_time'" in ended.detail


def test_results_with_no_name_anywhere_pair_with_any_calls(renderer, encode):
    results = [{"role": "tool", "content": "rain"}, {"role": "tool", "content": "14:00"}]
    row = {"tools": [_tool("get_weather"), _tool("get_time")], "messages": [USER1, *results, USER2]}
    row["messages"].insert(1, {"role": "assistant", "content": "calling"})
    _, step = _step(row, "rerender", _output(TWO[::-1]), renderer, encode)
    assert isinstance(step, NextPrompt)


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
@pytest.mark.parametrize(("calls", "results", "detail"), [
    (TWO, NAMED[:1], "the turn made 2 call(s) ['get_weather', 'get_time'] but the source has 1 cached "
                     "result(s) ['get_weather']"),
    (TWO[:1], NAMED, "the turn made 1 call(s) ['get_weather'] but the source has 2 cached "
                     "result(s) ['get_weather', 'get_time']"),
])
def test_a_different_number_of_calls_and_results_mismatches(renderer, mode, calls, results, detail, encode):
    row = _row([_fn("get_weather", CITY), _fn("get_time", CITY)], results, ["get_weather", "get_time"])
    _, ended = _step(row, mode, _output(calls), renderer, encode)
    assert ended == Ended("truncated", "tool_call_mismatch", 1, detail)


def test_parallel_tool_calls_stays_a_known_reason():
    assert PARALLEL_TOOL_CALLS == "parallel_tool_calls" and PARALLEL_TOOL_CALLS in REASONS


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6), inner, max_size=3), max_leaves=6)
call_lists = st.lists(st.tuples(names, st.dictionaries(st.text(max_size=8), values, max_size=3)),
                      min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call_lists, st.sampled_from([-1, 0, 1]), st.sampled_from(["rerender", "tokens"]), st.booleans())
def test_n_calls_pair_with_n_results_and_only_with_n(renderer, encode, render_ids, calls, delta, mode, by_id):
    n_results = len(calls) + delta
    called = [n for n, _ in calls]
    result_names = (called + ["extra_tool"])[:n_results]
    results = [{"role": "tool", "content": f"result {k}",
                **({"tool_call_id": f"id{k}"} if by_id else {"name": name})}
               for k, name in enumerate(result_names)]
    source_calls = [_fn(name, {}, f"id{k}") for k, name in enumerate(result_names)]
    row = _row(source_calls, results, called + ["extra_tool"])
    first, step = _step(row, mode, _output(calls), renderer, encode)
    if delta:
        expected = "tool_call_without_result" if n_results == 0 else "tool_call_mismatch"
        assert isinstance(step, Ended) and (step.outcome, step.reason) == ("truncated", expected)
        return
    assert isinstance(step, NextPrompt)
    if mode == "tokens":
        out = encode(_output(calls))
        assert step.input_ids[:len(first.input_ids) + len(out)] == first.input_ids + out
        tail = renderer.tokenizer.decode(step.input_ids[len(first.input_ids) + len(out):])
        assert tail.count("<tool_response>") == len(calls)
        return
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        _fn(name, args, f"id{k}" if by_id else None) for k, (name, args) in enumerate(calls)]}
    assert step.input_ids == render_ids([USER1, assistant, *results], row["tools"])
