"""Tests for the bundled demo tokenizer, its chat template and the sample prompts."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, BatchEncoding, PreTrainedTokenizerFast

from eaglefeed.devtools.demo import SAMPLE_PROMPTS, SPECIAL_TOKENS, TOKENIZER_DIR

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TOKENIZER_DIR, local_files_only=True)


def render(tok, messages, **kwargs):
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


def test_loads_fast_tokenizer(tok):
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len(tok) == 4096
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 0
    assert tok.bos_token is None
    assert tok.chat_template is not None


def test_special_tokens_are_single_ids_and_round_trip(tok):
    assert set(SPECIAL_TOKENS) <= set(tok.all_special_tokens)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        assert tok.encode(token, add_special_tokens=False) == [expected_id]
        assert tok.convert_tokens_to_ids(token) == expected_id
        assert tok.decode([expected_id]) == token


def test_no_special_tokens_added(tok):
    for text in ["hi", "Hello world!", "def f(x):\n    return x"]:
        ids = tok(text)["input_ids"]
        assert ids == tok(text, add_special_tokens=False)["input_ids"]
        assert not set(ids) & set(tok.all_special_ids)


def test_template_renders_roles_tools_and_tool_calls(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Need both cities.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": '{"temp": 4}'},
        {"role": "tool", "tool_call_id": "b", "content": '{"temp": 19}'},
    ]
    text = render(tok, messages, tools=[WEATHER_TOOL], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(WEATHER_TOOL) + "\n</tools>" in text
    assert '<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n' in text
    assert text.endswith(
        "<|im_start|>user\nWeather in Oslo and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nNeed both cities.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temp": 4}\n</tool_response>\n'
        '<tool_response>\n{"temp": 19}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )


def test_plain_chat_without_tools(tok):
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": [{"type": "text", "text": "U2"}]},
    ]
    assert render(tok, messages) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
    )


def test_enable_thinking_controls_generation_prompt(tok):
    messages = [{"role": "user", "content": "2+2?"}]
    off = render(tok, messages, add_generation_prompt=True, enable_thinking=False)
    on = render(tok, messages, add_generation_prompt=True, enable_thinking=True)
    default = render(tok, messages, add_generation_prompt=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on == default
    assert on.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert render(tok, messages) == "<|im_start|>user\n2+2?<|im_end|>\n"


def test_history_reasoning_is_dropped(tok):
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "<think>\nR2\n</think>\n\nA2"},
        {"role": "user", "content": "Q3"},
        {"role": "assistant", "content": "A3", "reasoning_content": "R3"},
    ]
    text = render(tok, messages)
    assert "R1" not in text and "R2" not in text
    assert "<|im_start|>assistant\nA2<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n<think>\nR3\n</think>\n\nA3<|im_end|>\n")


def test_tokenize_true_returns_batch_encoding(tok):
    messages = [{"role": "user", "content": "Hi <think> there"}]
    text = render(tok, messages, add_generation_prompt=True)
    encoded = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert isinstance(encoded, BatchEncoding)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert encoded["input_ids"] == ids
    plain = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert plain == ids
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.decode(ids) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_byte_level_round_trip(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == text


def to_messages(row):
    if "messages" in row:
        return row["messages"]
    return [
        {"role": SHAREGPT_ROLES[t["from"]], "content": t["value"]} for t in row["conversations"]
    ]


def test_sample_prompts_parse_and_render(tok):
    lines = SAMPLE_PROMPTS.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) >= 150
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        messages = to_messages(row)
        if messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        kwargs = row.get("chat_template_kwargs", {})
        text = render(tok, messages, tools=row.get("tools"), add_generation_prompt=True, **kwargs)
        assert text.startswith("<|im_start|>"), row["id"]
        suffix = "<think>\n\n</think>\n\n" if kwargs.get("enable_thinking") is False else ""
        assert text.endswith("<|im_start|>assistant\n" + suffix), row["id"]
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
