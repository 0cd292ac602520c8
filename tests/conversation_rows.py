"""The tool conversation the format tests regenerate: two turns of two parallel calls, each answered.

``user → 2 calls → 2 cached results → text → user → 2 calls → 2 cached results → text``: four
generated turns, two of them parallel calls; one tool (``get_weather``) so that a stand-in that
names an offered tool names the one the cached results are for.
"""

from __future__ import annotations

from typing import Any

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}


def _call(call_id: str, city: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": city}}}


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": text}


def parallel_tool_row(row_id: str = "weather-2x2") -> dict[str, Any]:
    """The source row (OpenAI messages, tools, cached results named and linked to their calls)."""
    return {"id": row_id, "tools": [WEATHER], "messages": [
        {"role": "system", "content": "Use the tools when they help."},
        {"role": "user", "content": "Weather in Oslo and in Köln?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "Oslo"), _call("c2", "Köln")]},
        _result("c1", "snow, -3 °C"), _result("c2", "rain, 7 °C"),
        {"role": "assistant", "content": "Oslo has snow, Köln rain."},
        {"role": "user", "content": "And tomorrow in 東京 and Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c3", "東京"), _call("c4", "Paris")]},
        _result("c3", "sun"), _result("c4", "fog"),
        {"role": "assistant", "content": "Sun in Tokyo, fog in Paris."}]}
