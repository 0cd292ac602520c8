"""Tool calls in a turn's content, read with the split markers of the turn's tokenizer.

The formats themselves live in ``eaglefeed.chat.toolcalls`` (one module per family); this
module hands them the tokenizer's single-token tags from its :class:`SplitMarkers`.
"""

from __future__ import annotations

from eaglefeed.chat.conversation.markers import SplitMarkers
from eaglefeed.chat.toolcalls import (
    FORMATS,
    TOOL_CALL_FORMATS,
    Decode,
    ParsedContent,
    ToolCall,
    ToolCallError,
    Tools,
    call_from_json,
)
from eaglefeed.chat.toolcalls import parse_content as _parse

__all__ = ["FORMATS", "TOOL_CALL_FORMATS", "ParsedContent", "ToolCall", "ToolCallError", "call_from_json",
           "parse_content"]


def parse_content(content_ids: list[int], markers: SplitMarkers, decode: Decode, fmt: str,
                  tools: Tools = None) -> ParsedContent:
    """Parse ``content_ids`` with the format named ``fmt``, splitting at ``markers``' tags by id.

    Raises:
        KeyError: when no format has that name.
        ToolCallError: when a call cannot be read.
    """
    return _parse(content_ids, fmt, tags=markers.vocab, decode=decode, tools=tools)
