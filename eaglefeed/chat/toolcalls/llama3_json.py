"""``llama3_json`` (Llama 3.1-3.3 JSON calling): the turn is ``{"name": ..., "parameters": {...}}`` calls.

The calls may follow ``<|python_tag|>`` and several are separated by ``;``. There is no tag
around a call: a turn whose text starts with ``{`` is read as calls only when the whole of it is
such calls (a JSON answer to the user is text); after ``<|python_tag|>`` it must be.
"""

from __future__ import annotations

import json

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    ToolCall,
    ToolCallError,
    call_from_value,
    joined_text,
    segments,
)
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

(PYTHON_TAG,) = TOOL_FORMAT_TAGS["llama3_json"]


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a Llama 3 turn.

    Raises:
        ToolCallError: text after ``<|python_tag|>`` that is not ``;``-separated JSON calls.
    """
    segs, _ = segments(ids, (PYTHON_TAG,), inp)
    tagged = [k for k, s in enumerate(segs) if s.tag == PYTHON_TAG]
    if tagged:
        before = [s.text for s in segs[:tagged[0]]]
        after = "".join(s.text for s in segs[tagged[0] + 1:] if s.tag is None)
        if len(tagged) > 1:
            raise ToolCallError("<|python_tag|> twice in one turn")
        return ParsedContent(text=joined_text(before), calls=calls_of(after))
    text = "".join(s.text for s in segs)
    if text.lstrip().startswith("{"):
        try:
            return ParsedContent(text="", calls=calls_of(text))
        except ToolCallError:
            pass  # JSON-looking text that is not calls is the answer itself
    return ParsedContent(text=joined_text([text]), calls=[])


def calls_of(text: str) -> list[ToolCall]:
    """``;``-separated JSON call objects (whitespace around them allowed).

    Raises:
        ToolCallError: when ``text`` is anything else.
    """
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    i = _skip(text, 0)
    while i < len(text):
        try:
            value, i = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ToolCallError(f"Llama tool call is not JSON: {exc}") from exc
        calls.append(call_from_value(value))
        i = _skip(text, i)
        if i < len(text):
            if text[i] != ";":
                raise ToolCallError(f"Llama tool calls separated by {text[i]!r}, not ';'")
            i = _skip(text, i + 1)
    if not calls:
        raise ToolCallError("<|python_tag|> without a call")
    return calls


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i
