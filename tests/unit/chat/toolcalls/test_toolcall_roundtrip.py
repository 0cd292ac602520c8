"""Every format: its family's template renders calls → ids → the parser gives the same calls back.

The template is the test's own, written after the family's published format
(tests/toolcall_tokenizers.py); the parser reads the ids the template's text tokenizes to, split
at the markers by id. Arguments carry unicode and nested JSON.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eaglefeed.chat.conversation.markers import split_markers_for
from eaglefeed.chat.conversation.split import CONTENT, REASONING, split_output
from eaglefeed.chat.conversation.toolcalls import ToolCall, parse_content
from eaglefeed.core.tokenizer.markers import HARMONY_TOKENS, TOOL_CALL_TAGS
from tests.toolcall_tokenizers import FAMILIES, FORMAT_NAMES

# Spellings a rendered string must not hold: the tokenizer would read them as the marker token.
_RESERVED = (*TOOL_CALL_TAGS, *HARMONY_TOKENS, *(t for fam in FAMILIES.values() for t in fam[1]),
             "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_response>", "</tool_response>",
             "<think>", "</think>", "analysis", "```")
_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12).filter(
    lambda s: not any(r in s for r in _RESERVED))
_key = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Lo", "Nd"), min_codepoint=48),
               min_size=1, max_size=8).filter(lambda s: not any(r in s for r in _RESERVED))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False, width=64), _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(_key, inner, max_size=3)),
                     max_leaves=8)
_name = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
_call = st.builds(ToolCall, name=_name, arguments=st.dictionaries(_key, _json, max_size=4))


def _schema_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {str: "string", list: "array", dict: "object", type(None): "null"}[type(value)]


def _tools(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Tools whose schemas type each argument (GLM-4.5 reads a bare value back by its type)."""
    props: dict[str, dict[str, Any]] = {}  # one tool per name, with every argument its calls pass
    for call in calls:
        typed = {k: {"type": _schema_type(v)} for k, v in call.arguments.items()}
        props.setdefault(call.name, {}).update(typed)
    return [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": p}}} for name, p in props.items()]


def _output_ids(tok: Any, message: dict[str, Any], tools: list[dict[str, Any]]) -> list[int]:
    """The ids the template renders for ``message`` after the generation prompt (a model's output)."""
    user = [{"role": "user", "content": "go"}]
    head = tok.apply_chat_template(user, tools=tools, add_generation_prompt=True, tokenize=False)
    # A model's turn ends at its stop token; the newline ChatML writes after it is the template's.
    full = tok.apply_chat_template([*user, message], tools=tools, tokenize=False).rstrip("\n")
    assert full.startswith(head), "the template renders the turn after its generation prompt"
    head_ids = tok(head, add_special_tokens=False)["input_ids"]
    full_ids = tok(full, add_special_tokens=False)["input_ids"]
    assert full_ids[:len(head_ids)] == head_ids
    return list(full_ids[len(head_ids):])


def _roundtrip(tok: Any, fmt: str, calls: list[ToolCall], content: str, reasoning: str) -> None:
    tools = _tools(calls)
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [
        {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
    if reasoning:
        message["reasoning_content"] = reasoning
    markers = split_markers_for(tok)
    split = split_output(_output_ids(tok, message, tools), markers)

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids, skip_special_tokens=False))

    parsed = parse_content(split.ids_of(CONTENT), markers, decode, fmt, tools)
    assert parsed.calls == calls
    assert parsed.text == content.strip()
    if reasoning and fmt != "llama3_json" and fmt != "mistral":
        assert split.has_think and decode(split.ids_of(REASONING)).strip() == reasoning


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(_call, min_size=1, max_size=3), data=st.data())
def test_rendered_calls_parse_back(fmt, family_tokenizers, calls, data):
    # One tool has one schema: two calls of one name whose argument differs in type would offer
    # the model two tools of that name, and GLM reads a bare value back by the (first) schema.
    types: dict[tuple[str, str], str] = {}
    for call in calls:
        for key, value in call.arguments.items():
            assume(types.setdefault((call.name, key), _schema_type(value)) == _schema_type(value))
    tok = family_tokenizers[fmt]
    # Llama's calls are the whole turn: text before them would make it a text answer.
    content = "" if fmt == "llama3_json" else data.draw(st.sampled_from(["", "Let me check."]))
    reasoning = "" if fmt in ("llama3_json", "mistral") else data.draw(st.sampled_from(["", "Two cities."]))
    _roundtrip(tok, fmt, calls, content, reasoning)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_two_parallel_calls_with_unicode_and_nested_json(fmt, family_tokenizers):
    calls = [ToolCall("get_weather", {"city": "Köln", "when": {"days": [1, 2], "tz": "Europe/Berlin"}}),
             ToolCall("get_weather", {"city": "東京", "units": None, "note": "naïve ½ — 😀"})]
    _roundtrip(family_tokenizers[fmt], fmt, calls, "", "")
