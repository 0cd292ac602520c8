"""Tool-call formats: a registry of parsers by name, and the choice of one from a tokenizer (``auto``).

Each family has its own module; :data:`FORMATS` names them. A parser reads a turn's content ids
by token id where its markers are added tokens (see ``_base``) and returns the calls, or raises
:class:`ToolCallError` when a call cannot be read: a conversation never continues from a guessed
call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eaglefeed.chat.toolcalls import (
    deepseek_v3,
    deepseek_v31,
    glm45,
    gpt_oss,
    hermes,
    kimi_k2,
    llama3_json,
    mistral,
)
from eaglefeed.chat.toolcalls._base import (
    Decode,
    ParsedContent,
    ParseInput,
    Parser,
    ToolCall,
    ToolCallError,
    Tools,
    call_from_json,
)
from eaglefeed.chat.toolcalls.detect import AUTO, Detected, detect_format


def parse_none(ids: list[int], inp: ParseInput) -> ParsedContent:
    """Format ``none``: the model makes no calls; all content is text."""
    return ParsedContent(text=inp.decode(ids).strip(), calls=[], pieces=[("text", list(ids))] if ids else [])


FORMATS: Mapping[str, Parser] = {
    "hermes": hermes.parse,
    "kimi_k2": kimi_k2.parse,
    "deepseek_v3": deepseek_v3.parse,
    "deepseek_v31": deepseek_v31.parse,
    "glm45": glm45.parse,
    "llama3_json": llama3_json.parse,
    "mistral": mistral.parse,
    "gpt_oss": gpt_oss.parse,
    "none": parse_none,
}
TOOL_CALL_FORMATS = tuple(FORMATS)  # the names a run may choose
TOOL_FORMAT_CHOICES = (AUTO, *TOOL_CALL_FORMATS)  # what --tool-format accepts


def parse_content(ids: list[int], fmt: str, *, tags: Mapping[str, int], decode: Decode,
                  tools: Tools = None) -> ParsedContent:
    """Parse a turn's content ``ids`` with the format named ``fmt``.

    Args:
        ids: the content ids (after the reasoning, stop token excluded).
        fmt: one of :data:`TOOL_CALL_FORMATS`.
        tags: spelling → id of the vocab's single-token markers.
        decode: ids → text, special tokens kept.
        tools: the conversation's tools (GLM-4.5 reads argument types from them).

    Raises:
        KeyError: when no format has that name.
        ToolCallError: when a call cannot be read.
    """
    return FORMATS[fmt](ids, ParseInput(tags=tags, decode=decode, tools=tools))


def choose_format(choice: str, tokenizer: Any) -> Detected:
    """The format a run uses: ``choice`` itself, or for ``auto`` what the tokenizer tells.

    Raises:
        ValueError: ``choice`` is neither ``auto`` nor a format's name.
    """
    if choice == AUTO:
        return detect_format(tokenizer)
    if choice not in FORMATS:
        raise ValueError(f"--tool-format must be one of {', '.join(TOOL_FORMAT_CHOICES)}, not {choice!r}")
    return Detected(choice, "--tool-format")


def has_tools(tools: Tools, messages: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a conversation can hold tool calls: it offers tools, calls one, or has a tool result."""
    return bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def unknown_format(tokenizer: str, detected: Detected) -> str:
    """The one line a run stops with when ``auto`` cannot tell the format and the data has tools."""
    return (f"cannot tell the tool-call format of tokenizer {tokenizer!r} ({detected.why}) and the data "
            f"has tools: pass --tool-format with one of {', '.join(TOOL_CALL_FORMATS)}")


__all__ = ["AUTO", "FORMATS", "TOOL_CALL_FORMATS", "TOOL_FORMAT_CHOICES", "Decode", "Detected", "ParseInput",
           "ParsedContent", "Parser", "ToolCall", "ToolCallError", "Tools", "call_from_json", "choose_format",
           "detect_format", "has_tools", "parse_content", "unknown_format"]
