"""The special tokens eaglefeed knows by name: the reasoning and tool-call markers."""

from __future__ import annotations

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

REASONING_TOKENS = (THINK_START, THINK_END)
"""An output holding one of these has reasoning (the ``has_reasoning`` column)."""

TOOL_CALL_TOKENS = (TOOL_CALL_START, "<|python_tag|>", "[TOOL_CALLS]")
"""An output holding one of these calls a tool (Hermes/Qwen, Llama 3 and Mistral templates)."""
