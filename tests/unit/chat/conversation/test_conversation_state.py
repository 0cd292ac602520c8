"""ConversationState as JSON: dict order kept (the chat template renders it), unknown keys ignored."""

import json

import pytest

from eaglefeed.chat.conversation import ConversationState

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                           "parameters": {"type": "object", "properties": {
                                               "unit": {"type": "string"}, "city": {"type": "string"}}}}}]


def state(**changes):
    fields = {"conversation_id": "c", "lane": 0, "turn_index": 1, "mode": "rerender", "max_turns": 4,
              "source_messages": [{"role": "user", "content": "héllo"}], "tools": TOOLS,
              "template_kwargs": {"z": 1, "a": 2}, "position": 1,
              "history": [{"role": "assistant", "content": "",
                           "tool_calls": [{"function": {"name": "get_weather",
                                                        "arguments": {"unit": "c", "city": "Paris"}}}]}]}
    return ConversationState(**{**fields, **changes})


def test_to_json_keeps_every_dicts_order_compactly_and_round_trips():
    text = state().to_json()
    assert ", " not in text and ": " not in text and "héllo" in text
    assert text.index('"unit"') < text.index('"city"')  # tools: as the source listed them
    assert text.index('"unit":"c"') < text.index('"city":"Paris"')  # call arguments too
    assert text.index('"z"') < text.index('"a"')
    again = ConversationState.from_json(text)
    assert again == state() and again.to_json() == text
    assert list(again.history[0]["tool_calls"][0]["function"]["arguments"]) == ["unit", "city"]


def test_from_json_ignores_a_field_a_later_version_added():
    data = json.loads(state().to_json())
    data["summary_of_earlier_turns"] = "a future field"
    assert ConversationState.from_json(json.dumps(data)) == state()


def test_from_json_still_refuses_missing_fields():
    data = json.loads(state().to_json())
    del data["position"]
    with pytest.raises(ValueError, match="wrong fields"):
        ConversationState.from_json(json.dumps(data))
