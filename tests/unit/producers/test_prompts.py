import pytest

from eaglefeed.errors import InputError
from producers.prompts import last_turn, parse_row, prompt_id


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
    a = prompt_id(turn, tools=None, render_settings={"t": 1})
    assert a == prompt_id(last_turn(parse_row({"messages": [{"role": "user", "content": "hi"}]},
                                              default_id="9")), tools=None, render_settings={"t": 1})
    assert a != prompt_id(turn, tools=None, render_settings={"t": 2})
    assert len(a) == 32
