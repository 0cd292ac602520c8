import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.chat.prompts import (
    PromptTurn,
    all_turns,
    canonical_json,
    last_turn,
    parse_row,
    prompt_id_from_json,
)
from eaglefeed.core.errors import InputError


def pid(turn, *, tools, settings):
    return prompt_id_from_json(turn, tools_json=canonical_json(tools), settings_json=canonical_json(settings))


def test_sharegpt_maps_speakers_to_roles_and_drops_trailing_assistant():
    conv = parse_row({"conversations": [
        {"from": "system", "value": "be brief"}, {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "hello"}, {"from": "human", "value": "more"},
        {"from": "gpt", "value": "sure"}]}, default_id="3")
    assert conv.row_id == "3"
    turn = last_turn(conv)
    assert [m["role"] for m in turn.messages] == ["system", "user", "assistant", "user"]
    assert turn.turn_index == 1


def test_openai_tool_call_arguments_are_parsed_like_sglang_does():
    conv = parse_row({"id": "x", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}, default_id="1")
    turn = last_turn(conv)
    assert turn.messages[-1]["role"] == "tool"
    assert turn.messages[1]["content"] == ""
    assert turn.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}


@pytest.mark.parametrize("row, reason", [
    ([1, 2], "wrong_type"),
    ({"foo": 1}, "no_messages"),
    ({"messages": []}, "empty_conversation"),
    ({"messages": "hi"}, "wrong_type"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown_role"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, "unknown_role"),
    ({"messages": [{"role": "user", "content": 5}]}, "wrong_type"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": "nope"}, "wrong_type"),
    ({"messages": [{"role": "user", "content": "x"}], "sampling_params": {"bogus": 1}}, "wrong_type"),
])
def test_bad_rows_have_reason_codes(row, reason):
    with pytest.raises(InputError) as err:
        parse_row(row, default_id="1")
    assert err.value.reason == reason


def test_no_user_turn():
    msgs = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]
    conv = parse_row({"messages": msgs}, default_id="1")
    with pytest.raises(InputError) as err:
        last_turn(conv)
    assert err.value.reason == "no_user_turn"


def test_prompt_id_is_stable_and_sensitive_to_settings():
    conv = parse_row({"messages": [{"role": "user", "content": "hi"}]}, default_id="1")
    turn = last_turn(conv)
    a = pid(turn, tools=None, settings={"t": 1})
    assert a == pid(last_turn(parse_row({"messages": [{"role": "user", "content": "hi"}]},
                                              default_id="9")), tools=None, settings={"t": 1})
    assert a != pid(turn, tools=None, settings={"t": 2})
    assert len(a) == 32


def test_sharegpt_function_call_and_observation_become_tool_calls_and_tool_messages():
    conv = parse_row({"system": "sys", "tools": '[{"name": "f"}]', "conversations": [
        {"from": "human", "value": "go"},
        {"from": "function_call", "value": '{"name": "f", "arguments": {"x": 1}}'},
        {"from": "observation", "value": "42"}]}, default_id="1")
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "tool"]
    call = {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    assert conv.messages[2]["tool_calls"] == [call]
    assert conv.tools == [{"name": "f"}]
    assert last_turn(conv).turn_index == 1


def test_row_level_system_yields_to_a_system_turn():
    conv = parse_row({"system": "row", "conversations": [{"from": "system", "value": "turn"},
                                                         {"from": "human", "value": "q"}]}, default_id="1")
    assert [m["content"] for m in conv.messages] == ["turn", "q"]


def test_nulls_from_parquet_structs_do_not_change_the_conversation_or_its_id():
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    padded = {"messages": [{"role": "user", "content": "hi", "tool_calls": None, "reasoning_content": None}],
              "conversations": None, "tools": None, "chat_template_kwargs": None}
    a, b = (last_turn(parse_row(r, default_id="1")) for r in (plain, padded))
    assert a == b
    assert pid(a, tools=None, settings={}) == pid(b, tools=None, settings={})


def test_text_parts_are_kept_for_the_template_and_images_are_refused():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    conv = parse_row({"messages": [{"role": "user", "content": parts}]}, default_id="1")
    assert conv.messages[0]["content"] == parts
    with pytest.raises(InputError) as err:
        parse_row({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
                  default_id="1")
    assert err.value.reason == "wrong_type"


def test_all_turns_gives_one_prompt_per_answer_with_the_history_before_it():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a3"},
            {"role": "user", "content": "u3"}]
    turns = all_turns(parse_row({"messages": msgs}, default_id="1"))
    assert [(t.turn_index, len(t.messages)) for t in turns] == [(0, 2), (1, 4), (2, 6), (3, 8)]
    assert turns[-1] == last_turn(parse_row({"messages": msgs}, default_id="1"))
    with pytest.raises(InputError):
        all_turns(parse_row({"messages": [{"role": "system", "content": "s"},
                                          {"role": "assistant", "content": "a"}]}, default_id="1"))


USER = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("row, reason", [
    ({"messages": USER, "tools": "[not json"}, "wrong_type"),
    ({"messages": USER, "chat_template_kwargs": [1]}, "wrong_type"),
    ({"messages": USER, "sampling_params": {"temperature": "hot"}}, "wrong_type"),
    ({"messages": USER, "sampling_params": {"top_k": 1.5}}, "wrong_type"),
    ({"messages": USER, "sampling_params": {"top_p": 0}}, "invalid_value"),
    ({"messages": USER, "sampling_params": {"max_new_tokens": 2**40}}, "invalid_value"),
    ({"messages": USER, "sampling_params": {"stop_token_ids": [True]}}, "wrong_type"),
    ({"conversations": [{"from": "function_call", "value": "{oops"}]}, "wrong_type"),
    ({"conversations": [{"from": "human", "value": "x"}], "system": 3}, "wrong_type"),
    ({"messages": USER, "id": "\ud800"}, "invalid_utf8"),
    ({"messages": USER, "id": True}, "wrong_type"),
    ({"messages": [{"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]}, "wrong_type"),
])
def test_more_bad_rows_have_reason_codes(row, reason):
    with pytest.raises(InputError) as err:
        parse_row(row, default_id="1")
    assert err.value.reason == reason


def test_a_lone_surrogate_in_content_is_invalid_utf8_not_a_crash():
    turn = last_turn(parse_row({"messages": [{"role": "user", "content": "a\udc00"}]}, default_id="1"))
    with pytest.raises(InputError) as err:
        pid(turn, tools=None, settings={})
    assert err.value.reason == "invalid_utf8"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@given(content=st.text(max_size=30), tools=st.none() | st.lists(
    st.dictionaries(st.text(max_size=5), _json, max_size=3), min_size=1, max_size=2), settings=_json)
def test_the_id_is_the_canonical_json_hash(content, tools, settings):
    turn = PromptTurn(turn_index=2, messages=[{"role": "user", "content": content}])
    expected = json.dumps({"messages": turn.messages, "tools": tools, "turn": 2, "settings": settings},
                          sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    want = hashlib.sha256(expected.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    if any("\ud800" <= c <= "\udfff" for c in expected):
        with pytest.raises(InputError):
            pid(turn, tools=tools, settings=settings)
        return
    assert pid(turn, tools=tools, settings=settings) == want
