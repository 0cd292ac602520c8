"""The library on the stand-in's outputs: think blocks and tool calls it writes continue the chain."""

from __future__ import annotations

from typing import Any

import pytest

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin.output import OutputModel, plan_completion
from eaglefeed.devtools.standin.sampling import parse_sampling_params
from eaglefeed.devtools.standin.vocab import load_vocab

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
MODEL = OutputModel(output_len_mean=20, output_len_sigma=0.3, think_fraction=1.0, tool_call_fraction=1.0,
                    length_fraction=0.0, parallel_tool_call_fraction=0.0)


def _row(result_name: str = "get_weather") -> dict[str, Any]:
    return {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "name": result_name, "content": "snow"},
        {"role": "assistant", "content": "Snow."},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "name": result_name, "content": "sun"},
        {"role": "assistant", "content": "Sun."}]}


@pytest.fixture(scope="module")
def vocab() -> Any:
    return load_vocab(TOKENIZER_DIR)


def _generate(vocab: Any, prompt: list[int], model: OutputModel = MODEL) -> tuple[list[int], str]:
    params = parse_sampling_params({"sampling_seed": 7}, vocab_size=vocab.vocab_size)
    done = plan_completion(vocab=vocab, model=model, input_ids=prompt, params=params, max_new_tokens=400)
    return done.output_ids, done.finish_reason["type"]


def _chain(mode: str, renderer: Any, vocab: Any, row: dict[str, Any],
           model: OutputModel = MODEL) -> tuple[list[NextPrompt], list[list[int]], Ended]:
    step = start(parse_row(row, default_id="0"), mode=mode, max_turns=16, lane=0, renderer=renderer,
                 conversation_id="s")
    prompts, outputs = [], []
    while isinstance(step, NextPrompt):
        prompts.append(step)
        out, finish = _generate(vocab, step.input_ids, model)
        outputs.append(out)
        step = continue_after(step.state, prompt_ids=step.input_ids, output_ids=out, finish_reason=finish,
                              renderer=renderer)
    return prompts, outputs, step


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_four_turn_chain_with_calls_and_reasoning_completes(mode, renderer, vocab):
    prompts, outputs, ended = _chain(mode, renderer, vocab, _row())
    assert ended == Ended("complete", "user_turns_done", 4)
    call_id = vocab.tool_call_start
    assert [call_id in out for out in outputs] == [True, False, True, False]
    assert all(out[0] == vocab.think_start for out in outputs)
    if mode == "tokens":
        for before, out, after in zip(prompts, outputs, prompts[1:], strict=False):
            assert after.input_ids[:len(before.input_ids) + len(out)] == before.input_ids + out


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_call_of_a_tool_the_cache_does_not_hold_truncates(mode, renderer, vocab):
    prompts, _, ended = _chain(mode, renderer, vocab, _row(result_name="get_time"))
    assert (len(prompts), ended.reason, ended.turns_done) == (1, "tool_call_mismatch", 1)


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_parallel_calls_from_the_standin_pair_with_the_cached_results(mode, renderer, vocab):
    model = OutputModel(output_len_mean=20, think_fraction=0.0, tool_call_fraction=1.0, length_fraction=0.0,
                        parallel_tool_call_fraction=1.0)
    prompts, outputs, ended = _chain(mode, renderer, vocab, _parallel_row(), model)
    assert ended == Ended("complete", "user_turns_done", 4)
    assert [out.count(vocab.tool_call_start) for out in outputs] == [2, 0, 2, 0]
    assert renderer.tokenizer.decode(prompts[1].input_ids).count("<tool_response>") == 2


def test_parallel_calls_for_one_cached_result_mismatch(renderer, vocab):
    model = OutputModel(output_len_mean=20, think_fraction=0.0, tool_call_fraction=1.0, length_fraction=0.0,
                        parallel_tool_call_fraction=1.0)
    _, _, ended = _chain("rerender", renderer, vocab, _row(), model)
    assert (ended.reason, ended.turns_done) == ("tool_call_mismatch", 1)


def _parallel_row() -> dict[str, Any]:
    row = _row()
    messages = row["messages"]
    for i in (5, 1):  # each source call turn made two calls, and both results are cached
        messages[i] = {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]}
        messages.insert(i + 2, {"role": "tool", "name": "get_weather", "content": "wind"})
    return row


def test_length_from_the_standin_ends_the_chain(renderer, vocab):
    model = OutputModel(output_len_mean=20, think_fraction=0.0, tool_call_fraction=0.0, length_fraction=1.0)
    _, _, ended = _chain("tokens", renderer, vocab, _row(), model)
    assert (ended.reason, ended.turns_done) == ("length", 1)
