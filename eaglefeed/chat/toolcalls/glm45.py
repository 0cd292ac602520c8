r"""``glm45`` (Zhipu GLM-4.5, 4.6, 4.7): a ``<tool_call>`` block of the name and key/value tag pairs.

``<tool_call>NAME\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>``. The
template writes a string value as it is and any other value as JSON, so a value is read back by
the tool's schema: as text where the parameter is a string, as JSON otherwise (and as text when
it is not JSON and the schema does not say).
"""

from __future__ import annotations

import json
from typing import Any

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    Segment,
    ToolCall,
    ToolCallError,
    Tools,
    joined_text,
    segments,
)
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END = TOOL_FORMAT_TAGS["glm45"]


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a GLM-4.5 turn.

    Raises:
        ToolCallError: a tag out of place, an unclosed block, a missing name or a repeated key.
    """
    segs, _ = segments(ids, TOOL_FORMAT_TAGS["glm45"], inp)
    text: list[str] = []
    calls: list[ToolCall] = []
    i = 0
    while i < len(segs):
        seg = segs[i]
        if seg.tag is None:
            text.append(seg.text)
            i += 1
        elif seg.tag == OPEN:
            call, i = _call(segs, i + 1, inp.tools)
            calls.append(call)
        else:
            raise ToolCallError(f"{seg.tag} outside a tool call")
    return ParsedContent(text=joined_text(text), calls=calls)


def _call(segs: list[Segment], i: int, tools: Tools) -> tuple[ToolCall, int]:
    name = ""
    if i < len(segs) and segs[i].tag is None:
        name = segs[i].text.strip()
        i += 1
    if not name:
        raise ToolCallError("GLM tool call without a function name")
    types = _param_types(tools, name)
    args: dict[str, Any] = {}
    while i < len(segs):
        seg = segs[i]
        if seg.tag is None and not seg.text.strip():
            i += 1
        elif seg.tag == CLOSE:
            return ToolCall(name=name, arguments=args), i + 1
        elif seg.tag == KEY:
            key, i = _between(segs, i + 1, KEY_END)
            while i < len(segs) and segs[i].tag is None and not segs[i].text.strip():
                i += 1
            if i >= len(segs) or segs[i].tag != VALUE:
                raise ToolCallError(f"GLM argument {key!r} has no <arg_value>")
            raw, i = _between(segs, i + 1, VALUE_END)
            key = key.strip()
            if key in args:
                raise ToolCallError(f"GLM argument {key!r} given twice")
            args[key] = _value(raw, types.get(key))
        else:
            raise ToolCallError(f"unexpected {seg.tag or 'text'!r} in a GLM tool call")
    raise ToolCallError("<tool_call> is never closed")


def _between(segs: list[Segment], i: int, closing: str) -> tuple[str, int]:
    if i < len(segs) and segs[i].tag is None:
        if i + 1 < len(segs) and segs[i + 1].tag == closing:
            return segs[i].text, i + 2
    elif i < len(segs) and segs[i].tag == closing:
        return "", i + 1
    raise ToolCallError(f"GLM argument tag is not closed by {closing}")


def _value(raw: str, declared: str | None) -> Any:
    if declared == "string":
        return raw
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        if declared is None:
            return raw  # the schema does not say: a bare word is a string
        raise ToolCallError(f"GLM argument value {raw[:40]!r} is not the JSON a {declared} needs") from None


def _param_types(tools: Tools, name: str) -> dict[str, str]:
    """Parameter name → its JSON-schema ``type`` (only single string types) for the tool ``name``."""
    for tool in tools or ():
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            if isinstance(props, dict):
                return {k: v["type"] for k, v in props.items()
                        if isinstance(v, dict) and isinstance(v.get("type"), str)}
    return {}
