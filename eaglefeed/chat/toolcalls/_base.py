"""What every tool-call format shares: the call, the parse result, the error, and the tag segmenter.

A format's parser takes a turn's content ids (the output after its reasoning, stop token
excluded) and returns the text outside the calls and the calls. Tags are found by token id when
each of the format's tags is one token of the vocab (a model's text may quote a tag, but only the
token is one); otherwise on the decoded content. Only the spans between tags are decoded, to read
names and JSON arguments; nothing is ever re-encoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Decode = Callable[[list[int]], str]
Tools = Sequence[Mapping[str, Any]] | None


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


@dataclass(frozen=True, kw_only=True)
class ParseInput:
    """What a parser reads besides the content ids.

    Attributes:
        tags: spelling → id of the single-token markers of the vocab (``SplitMarkers.vocab``).
        decode: ids → text, special tokens kept.
        tools: the conversation's tools (OpenAI shape): formats that write arguments as bare
            strings (GLM-4.5) read their types from the schema.
    """

    tags: Mapping[str, int]
    decode: Decode
    tools: Tools = None


@dataclass(frozen=True)
class Segment:
    """A tag (``tag`` is its spelling) or a run of text between tags (``tag`` is None).

    ``ids`` are the segment's ids when the content was split by id, else empty.
    """

    tag: str | None
    text: str
    ids: list[int] = field(default_factory=list)


Parser = Callable[[list[int], ParseInput], ParsedContent]


def segments(ids: list[int], spellings: Sequence[str], inp: ParseInput) -> tuple[list[Segment], bool]:
    """``ids`` cut at the tags ``spellings``: by id when every one is a single token, else by text.

    Returns:
        the segments in order (empty text runs left out), and whether the cut was by id.
    """
    by_id = {inp.tags[s]: s for s in spellings if s in inp.tags}
    if len(by_id) == len(spellings):
        out: list[Segment] = []
        run: list[int] = []
        for token in ids:
            if token in by_id:
                if run:
                    out.append(Segment(None, inp.decode(run), run))
                    run = []
                out.append(Segment(by_id[token], by_id[token], [token]))
            else:
                run.append(token)
        if run:
            out.append(Segment(None, inp.decode(run), run))
        return out, True
    text = inp.decode(ids)
    pattern = re.compile("|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True)))
    found: list[Segment] = []
    last = 0
    for match in pattern.finditer(text):
        if match.start() > last:
            found.append(Segment(None, text[last:match.start()]))
        found.append(Segment(match.group(), match.group()))
        last = match.end()
    if last < len(text):
        found.append(Segment(None, text[last:]))
    return found, False


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` as a JSON object (empty text: no arguments).

    Raises:
        ToolCallError: when it is not JSON or not an object.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ToolCallError(f"{what} are not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ToolCallError(f"{what} must be a JSON object")
    return value


def call_from_json(text: str) -> ToolCall:
    """A call from its JSON body ``{"name": str, "arguments": object or JSON string of one}``.

    Raises:
        ToolCallError: when the body is not such an object.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ToolCallError(f"tool call is not JSON: {exc}") from exc
    return call_from_value(value)


def call_from_value(value: Any) -> ToolCall:
    """A call from a decoded JSON value (``name`` plus ``arguments`` or Llama's ``parameters``).

    Raises:
        ToolCallError: when the value is not such an object.
    """
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise ToolCallError("tool call must be an object with a non-empty string 'name'")
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        return ToolCall(name=value["name"], arguments=json_object(args, "tool call arguments"))
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolCallError("tool call arguments must be a JSON object")
    return ToolCall(name=value["name"], arguments=args)


def joined_text(parts: Sequence[str]) -> str:
    """The text outside the calls, as the content of the assistant message."""
    return "".join(parts).strip()
