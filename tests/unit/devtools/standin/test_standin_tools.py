"""The stand-in's tool calls name a tool the prompt offers, encoded with the served tokenizer."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.standin.output import OutputModel, plan_completion
from eaglefeed.devtools.standin.output.tools import (
    OfferedTool,
    answers_a_tool_result,
    find_subsequence,
    offered_tools,
)
from eaglefeed.devtools.standin.sampling import parse_sampling_params

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}},
    {"type": "function",
     "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
CALLS = OutputModel(output_len_mean=30, think_fraction=0, tool_call_fraction=1.0, length_fraction=0,
                    parallel_tool_call_fraction=0.0)


@pytest.fixture(scope="module")
def hf():
    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def _prompt(hf, messages, tools=TOOLS):
    return list(hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"])


def _plan(vocab, prompt, model=CALLS, seed=None):
    params = parse_sampling_params({"sampling_seed": seed} if seed is not None else None,
                                   vocab_size=vocab.vocab_size)
    return plan_completion(vocab=vocab, model=model, input_ids=prompt, params=params, max_new_tokens=1000)


def _calls(hf, ids):
    text = hf.decode(ids, skip_special_tokens=False)
    bodies = [part.split("</tool_call>")[0] for part in text.split("<tool_call>")[1:]]
    return [json.loads(body) for body in bodies]


def test_the_offered_tools_are_read_from_the_prompt(vocab, hf):
    prompt = _prompt(hf, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    weather = OfferedTool("get_weather", ("city", "unit"), ("string", "string"))
    assert offered_tools(prompt, vocab) == (weather, OfferedTool("get_time", (), ()))
    assert offered_tools(_prompt(hf, [{"role": "user", "content": "hi"}], tools=None), vocab) == ()


def test_a_call_names_an_offered_tool_and_is_the_tokenizers_encoding(vocab, hf):
    prompt = _prompt(hf, [{"role": "user", "content": "Weather in Paris?"}])
    names = set()
    for seed in range(12):
        out = _plan(vocab, prompt, seed=seed).output_ids
        assert out[-1] == vocab.eos_id
        (call,) = _calls(hf, out)
        assert call["name"] in {"get_weather", "get_time"}
        names.add(call["name"])
        if call["name"] == "get_weather":
            assert set(call["arguments"]) == {"city", "unit"}
        # The ids are what the tokenizer makes of the call text.
        start = out.index(vocab.tool_call_start)
        text = hf.decode(out[start:-1], skip_special_tokens=False)
        assert out[start:-1] == hf.encode(text, add_special_tokens=False)
    assert names == {"get_weather", "get_time"}  # the seed picks among the offered tools
    assert _plan(vocab, prompt, seed=3) == _plan(vocab, prompt, seed=3)


def test_parallel_calls_in_their_share(vocab, hf):
    prompt = _prompt(hf, [{"role": "user", "content": "Weather in Paris?"}])
    model = OutputModel(output_len_mean=30, think_fraction=0, tool_call_fraction=1.0, length_fraction=0,
                        parallel_tool_call_fraction=1.0)
    assert len(_calls(hf, _plan(vocab, prompt, model).output_ids)) == 2


def test_no_call_right_after_a_tool_result(vocab, hf):
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "rain"}]
    prompt = _prompt(hf, messages)
    assert answers_a_tool_result(prompt, vocab)
    assert vocab.tool_call_start not in _plan(vocab, prompt).output_ids
    later = _prompt(hf, [*messages, {"role": "assistant", "content": "Rain."},
                         {"role": "user", "content": "Oslo?"}])
    assert not answers_a_tool_result(later, vocab)
    assert _calls(hf, _plan(vocab, later).output_ids)


def test_find_subsequence_and_the_new_fraction_is_checked():
    assert find_subsequence([1, 2, 3, 2, 4], (2, 4)) == 3
    assert find_subsequence([1, 2], (3,)) is None and find_subsequence([1], ()) is None
    with pytest.raises(ValueError, match="parallel_tool_call_fraction"):
        StandinConfig(parallel_tool_call_fraction=1.5)
