"""``mistral`` (Mistral, Mixtral, Ministral, Magistral, Devstral): calls after ``[TOOL_CALLS]``.

Two generations of the format, told apart by what follows the tag:

* tokenizer v11 and later: ``[TOOL_CALLS]NAME[ARGS]{...}`` once per call (``[CALL_ID]ID`` may
  sit between the name and ``[ARGS]``);
* before v11: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, one JSON array of calls.

Text before the first ``[TOOL_CALLS]`` is the content.
"""

from __future__ import annotations

import json

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    Segment,
    ToolCall,
    ToolCallError,
    call_from_value,
    joined_text,
    json_object,
    segments,
)
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

CALLS, ARGS, CALL_ID = TOOL_FORMAT_TAGS["mistral"]


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a Mistral turn.

    Raises:
        ToolCallError: a malformed call (no name, no ``[ARGS]``, arguments not JSON).
    """
    # A tokenizer before v11 has [TOOL_CALLS] but no [ARGS]/[CALL_ID] token: split at what it has.
    present = tuple(s for s in (CALLS, ARGS, CALL_ID) if s in inp.tags)
    segs, _ = segments(ids, present if CALLS in present else (CALLS, ARGS, CALL_ID), inp)
    first = next((k for k, s in enumerate(segs) if s.tag == CALLS), None)
    if first is None:
        stray = next((s.tag for s in segs if s.tag is not None), None)
        if stray is not None:
            raise ToolCallError(f"{stray} without [TOOL_CALLS]")
        return ParsedContent(text=joined_text([s.text for s in segs]), calls=[])
    text = joined_text([s.text for s in segs[:first]])
    rest = segs[first + 1:]
    body = "".join(s.text if s.tag is None else "" for s in rest)
    if any(s.tag == ARGS for s in rest) or not body.lstrip().startswith("["):
        return ParsedContent(text=text, calls=_v11(rest))
    if any(s.tag is not None for s in rest):
        raise ToolCallError("[TOOL_CALLS] repeated in a pre-v11 Mistral call list")
    return ParsedContent(text=text, calls=_array(body))


def _v11(segs: list[Segment]) -> list[ToolCall]:
    """``NAME[ARGS]{...}`` runs, separated by ``[TOOL_CALLS]`` (whitespace between them allowed)."""
    calls: list[ToolCall] = []
    i = 0
    while i < len(segs):
        if i >= len(segs) or segs[i].tag is not None or not segs[i].text.strip():
            raise ToolCallError("Mistral tool call without a function name")
        name = segs[i].text.strip()
        i += 1
        if i < len(segs) and segs[i].tag == CALL_ID:
            i += 2 if i + 1 < len(segs) and segs[i + 1].tag is None else 1
        if i >= len(segs) or segs[i].tag != ARGS:
            raise ToolCallError(f"Mistral tool call {name!r} has no [ARGS]")
        i += 1
        args = segs[i].text if i < len(segs) and segs[i].tag is None else ""
        i += 1 if i < len(segs) and segs[i].tag is None else 0
        calls.append(ToolCall(name=name, arguments=json_object(args, "tool call arguments")))
        if i < len(segs):
            if segs[i].tag != CALLS:
                raise ToolCallError(f"unexpected {segs[i].tag} after Mistral tool call {name!r}")
            i += 1
    return calls


def _array(body: str) -> list[ToolCall]:
    try:
        value, end = json.JSONDecoder().raw_decode(body.strip())
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ToolCallError(f"Mistral tool calls are not JSON: {exc}") from exc
    if body.strip()[end:].strip():
        raise ToolCallError("text after the Mistral tool-call array")
    if not isinstance(value, list) or not value:
        raise ToolCallError("Mistral tool calls must be a non-empty JSON array")
    return [call_from_value(v) for v in value]
