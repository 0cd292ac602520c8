"""``deepseek_v31`` (DeepSeek-V3.1, V3.2): the name before the separator, the bare JSON arguments after it.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.
"""

from __future__ import annotations

from eaglefeed.chat.toolcalls._base import ParsedContent, ParseInput, ToolCall, ToolCallError, json_object
from eaglefeed.chat.toolcalls._sections import parse_sections
from eaglefeed.chat.toolcalls.deepseek_v3 import TAGS


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a DeepSeek-V3.1 turn.

    Raises:
        ToolCallError: a malformed section, an empty name, or arguments that are not a JSON object.
    """
    return parse_sections(ids, inp, TAGS, _call)


def _call(head: str, args: str) -> ToolCall:
    name = head.strip()
    if not name or "\n" in name:
        raise ToolCallError(f"DeepSeek-V3.1 tool call name {name!r} is not one word")
    return ToolCall(name=name, arguments=json_object(args, "tool call arguments"))
