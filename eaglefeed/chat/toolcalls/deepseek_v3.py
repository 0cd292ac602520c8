r"""``deepseek_v3`` (DeepSeek-V3, R1-0528): each call typed ``function`` and its arguments in a JSON fence.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.
"""

from __future__ import annotations

import re

from eaglefeed.chat.toolcalls._base import ParsedContent, ParseInput, ToolCall, ToolCallError, json_object
from eaglefeed.chat.toolcalls._sections import SectionTags, parse_sections
from eaglefeed.core.tokenizer import TOOL_FORMAT_TAGS

_SB, _SE, _CB, _CE, _SEP = TOOL_FORMAT_TAGS["deepseek_v3"]
TAGS = SectionTags(section_begin=_SB, section_end=_SE, call_begin=_CB, split=_SEP, call_end=_CE)
_FENCED = re.compile(r"(?P<name>[^\n]+)\n```json\n(?P<args>.*)\n```\s*", re.DOTALL)


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a DeepSeek-V3 turn.

    Raises:
        ToolCallError: a malformed section, a call not typed ``function``, or no JSON fence.
    """
    return parse_sections(ids, inp, TAGS, _call)


def _call(head: str, body: str) -> ToolCall:
    if head.strip() != "function":
        raise ToolCallError(f"DeepSeek-V3 tool call of type {head.strip()!r}, not 'function'")
    match = _FENCED.fullmatch(body)
    if match is None or not match.group("name").strip():
        raise ToolCallError("DeepSeek-V3 tool call is not NAME then a ```json fence")
    return ToolCall(name=match.group("name").strip(), arguments=json_object(match.group("args"),
                                                                            "tool call arguments"))
