"""``kimi_k2`` (Moonshot Kimi-K2, K2.5): calls in a section, each named by its call id ``functions.NAME:IDX``.

``<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
{"city": "Oslo"}<|tool_call_end|>...<|tool_calls_section_end|>``. The id's index counts the
calls of the conversation; the name is what sits between ``functions.`` and the colon.
"""

from __future__ import annotations

import re

from eaglefeed.chat.toolcalls._base import ParsedContent, ParseInput, ToolCall, ToolCallError, json_object
from eaglefeed.chat.toolcalls._sections import SectionTags, parse_sections
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

_SB, _SE, _CB, _AB, _CE = TOOL_FORMAT_TAGS["kimi_k2"]
TAGS = SectionTags(section_begin=_SB, section_end=_SE, call_begin=_CB, split=_AB, call_end=_CE)
_CALL_ID = re.compile(r"\s*(?:functions\.)?(?P<name>[^\s:]+):(?P<index>\d+)\s*")


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a Kimi-K2 turn.

    Raises:
        ToolCallError: a malformed section or call id, or arguments that are not a JSON object.
    """
    return parse_sections(ids, inp, TAGS, _call)


def _call(head: str, args: str) -> ToolCall:
    match = _CALL_ID.fullmatch(head)
    if match is None:
        raise ToolCallError(f"Kimi tool call id {head.strip()!r} is not functions.NAME:INDEX")
    return ToolCall(name=match.group("name"), arguments=json_object(args, "tool call arguments"))
