"""Tool calls in a turn's content, parsed by a named format (a registry of parsers).

A parser takes the content ids (the output after the reasoning, stop token excluded) and returns
the content text with the calls taken out, and the calls. It splits at tag tokens by id when the
tags are single tokens of the vocab, and on the decoded content otherwise. A malformed call raises
:class:`ToolCallError`: a conversation never continues from a guessed call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.chat.conversation.markers import SplitMarkers
from eaglefeed.core.markers import TOOL_CALL_END, TOOL_CALL_START

Decode = Callable[[list[int]], str]


class ToolCallError(ValueError):
    """The content holds a call that its format cannot read (unclosed tag, bad JSON, no name)."""


@dataclass(frozen=True)
class ToolCall:
    """One call: the function's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedContent:
    """The content without its calls, and the calls in order.

    Attributes:
        text: the content text outside the calls, stripped of surrounding whitespace.
        calls: the calls, in output order (more than one: parallel calls).
        pieces: when the tags were split by id, the content ids as consecutive ``(kind, ids)``
            runs (``text``, ``open``, ``body``, ``close``) that join to the content ids; else empty.
    """

    text: str
    calls: list[ToolCall]
    pieces: list[tuple[str, list[int]]] = field(default_factory=list)


Parser = Callable[[list[int], SplitMarkers, Decode], ParsedContent]


def parse_none(content_ids: list[int], markers: SplitMarkers, decode: Decode) -> ParsedContent:
    """Format ``none``: the model makes no calls; all content is text."""
    return ParsedContent(text=decode(content_ids).strip(), calls=[],
                         pieces=[("text", list(content_ids))] if content_ids else [])


def parse_hermes(content_ids: list[int], markers: SplitMarkers, decode: Decode) -> ParsedContent:
    r"""Format ``hermes`` (Qwen, Hermes): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

    Several calls in one turn are parallel calls. Text around the calls is the content.
    """
    open_id, close_id = markers.single(TOOL_CALL_START), markers.single(TOOL_CALL_END)
    if open_id is not None and close_id is not None:
        return _hermes_by_id(content_ids, open_id, close_id, decode)
    return _hermes_by_text(decode(content_ids))


FORMATS: dict[str, Parser] = {"hermes": parse_hermes, "none": parse_none}
TOOL_CALL_FORMATS = tuple(FORMATS)  # the names a run may choose


def parse_content(content_ids: list[int], markers: SplitMarkers, decode: Decode, fmt: str) -> ParsedContent:
    """Parse ``content_ids`` with the format named ``fmt``.

    Raises:
        KeyError: when no format has that name.
        ToolCallError: when a call cannot be read.
    """
    return FORMATS[fmt](content_ids, markers, decode)


def call_from_json(text: str) -> ToolCall:
    """A call from its JSON body ``{"name": str, "arguments": object or JSON string of one}``.

    Raises:
        ToolCallError: when the body is not such an object.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ToolCallError(f"tool call is not JSON: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise ToolCallError("tool call must be an object with a non-empty string 'name'")
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ToolCallError(f"tool call arguments are not JSON: {exc}") from exc
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolCallError("tool call arguments must be a JSON object")
    return ToolCall(name=value["name"], arguments=args)


def _hermes_by_id(ids: list[int], open_id: int, close_id: int, decode: Decode) -> ParsedContent:
    pieces: list[tuple[str, list[int]]] = []
    calls: list[ToolCall] = []
    text_ids: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i] == close_id:
            raise ToolCallError("</tool_call> without <tool_call>")
        if ids[i] != open_id:
            j = i
            while j < len(ids) and ids[j] not in (open_id, close_id):
                j += 1
            pieces.append(("text", ids[i:j]))
            text_ids.extend(ids[i:j])
            i = j
            continue
        try:
            end = ids.index(close_id, i + 1)
        except ValueError:
            raise ToolCallError("<tool_call> is never closed") from None
        body = ids[i + 1:end]
        if open_id in body:
            raise ToolCallError("<tool_call> inside a tool call")
        calls.append(call_from_json(decode(body)))
        pieces.append(("open", [open_id]))
        if body:
            pieces.append(("body", body))
        pieces.append(("close", [close_id]))
        i = end + 1
    return ParsedContent(text=decode(text_ids).strip(), calls=calls, pieces=pieces)


def _hermes_by_text(text: str) -> ParsedContent:
    open_tag, close_tag = "<tool_call>", "</tool_call>"
    calls: list[ToolCall] = []
    outside: list[str] = []
    rest = text
    while True:
        start = rest.find(open_tag)
        stray = rest.find(close_tag)
        if stray != -1 and (start == -1 or stray < start):
            raise ToolCallError("</tool_call> without <tool_call>")
        if start == -1:
            outside.append(rest)
            break
        outside.append(rest[:start])
        end = rest.find(close_tag, start + len(open_tag))
        if end == -1:
            raise ToolCallError("<tool_call> is never closed")
        body = rest[start + len(open_tag):end]
        if open_tag in body:
            raise ToolCallError("<tool_call> inside a tool call")
        calls.append(call_from_json(body))
        rest = rest[end + len(close_tag):]
    return ParsedContent(text="".join(outside).strip(), calls=calls)
