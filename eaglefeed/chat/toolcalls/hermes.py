r"""``hermes`` (Qwen, Hermes, NousResearch): ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``.

Each call is its own tagged block; several blocks in one turn are parallel calls, and the text
around them is the content.
"""

from __future__ import annotations

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    ToolCall,
    ToolCallError,
    call_from_json,
    joined_text,
    segments,
)
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

OPEN, CLOSE = TOOL_FORMAT_TAGS["hermes"]


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a Hermes turn (the JSON body of each ``<tool_call>`` block).

    Raises:
        ToolCallError: a close without an open, an unclosed or nested block, or a bad body.
    """
    segs, by_id = segments(ids, (OPEN, CLOSE), inp)
    calls: list[ToolCall] = []
    text: list[str] = []
    pieces: list[tuple[str, list[int]]] = []
    i = 0
    while i < len(segs):
        seg = segs[i]
        if seg.tag == CLOSE:
            raise ToolCallError("</tool_call> without <tool_call>")
        if seg.tag is None:
            text.append(seg.text)
            pieces.append(("text", seg.ids))
            i += 1
            continue
        body = segs[i + 1] if i + 1 < len(segs) and segs[i + 1].tag is None else None
        end = i + (2 if body is not None else 1)
        if end >= len(segs):
            raise ToolCallError("<tool_call> is never closed")
        if segs[end].tag != CLOSE:
            raise ToolCallError("<tool_call> inside a tool call")
        calls.append(call_from_json(body.text if body is not None else ""))
        pieces.append(("open", seg.ids))
        if body is not None:
            pieces.append(("body", body.ids))
        pieces.append(("close", segs[end].ids))
        i = end + 1
    return ParsedContent(text=joined_text(text), calls=calls, pieces=pieces if by_id else [])
