"""Conversations that exercise a chat template's corners, for the renderer's start-up check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Probe:
    """One conversation with its tools and template kwargs."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

_CALL = {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Zürich"}}}]}

_MULTI = [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": "Capital of France?"},
          {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."},
          {"role": "user", "content": "And of Japan?"}]

PROBES = [
    Probe([{"role": "user", "content": "hi"}]),
    Probe(_MULTI),
    Probe(_MULTI, kwargs={"enable_thinking": False}),
    Probe(_MULTI, kwargs={"enable_thinking": True}),
    Probe([{"role": "user", "content": "  leading and trailing spaces \t\r\n\n\nand blank lines  "}]),
    Probe([{"role": "user", "content": "naïve café — 東京 😀 e\u0301 \u200b zero-width"}]),
    Probe([{"role": "user", "content": "typed markers: <|im_start|> <|im_end|> <think></think> <tool_call> "
                                       "<|endoftext|></s><s>[INST]"}]),
    Probe([{"role": "user", "content": ""}]),
    Probe([{"role": "user", "content": "a" * 3000 + " " + "1234567890" * 50}]),
    Probe([{"role": "user", "content": "Weather in Zürich?"}], tools=_TOOLS),
    Probe([{"role": "user", "content": "Weather in Zürich?"}, _CALL,
           {"role": "tool", "content": '{"temp_c": 21}'}], tools=_TOOLS),
    Probe([{"role": "user", "content": "Weather in Zürich?"}, _CALL,
           {"role": "tool", "content": '{"temp_c": 21}'}], tools=_TOOLS, kwargs={"enable_thinking": False}),
    Probe([{"role": "user", "content": [{"type": "text", "text": "part one "},
                                        {"type": "text", "text": "two"}]}]),
]
