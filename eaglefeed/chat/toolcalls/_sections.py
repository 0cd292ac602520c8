"""The shape Kimi-K2 and DeepSeek share: a section of calls, each call a begin … end run of tags.

``text <section-begin> (<call-begin> head <split> args <call-end>)+ <section-end> text``, with
whitespace allowed between calls. Each family says what its tags are and how a call's ``head``
(the text before the split tag) and ``args`` (the text after it) give the name and arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    Segment,
    ToolCall,
    ToolCallError,
    joined_text,
    segments,
)


@dataclass(frozen=True, kw_only=True)
class SectionTags:
    """The tag spellings of one sectioned format."""

    section_begin: str
    section_end: str
    call_begin: str
    split: str
    call_end: str


MakeCall = Callable[[str, str], ToolCall]  # (head text, argument text) -> the call


def parse_sections(ids: list[int], inp: ParseInput, tags: SectionTags, make: MakeCall) -> ParsedContent:
    """The calls of a sectioned turn; text outside the sections is the content.

    Raises:
        ToolCallError: a tag out of place, an unclosed section or call, or a bad call.
    """
    spellings = (tags.section_begin, tags.section_end, tags.call_begin, tags.split, tags.call_end)
    segs, _ = segments(ids, spellings, inp)
    text: list[str] = []
    calls: list[ToolCall] = []
    i = 0
    while i < len(segs):
        seg = segs[i]
        if seg.tag is None:
            text.append(seg.text)
            i += 1
        elif seg.tag == tags.section_begin:
            i = _section(segs, i + 1, tags, make, calls)
        else:
            raise ToolCallError(f"{seg.tag} outside a tool-call section")
    return ParsedContent(text=joined_text(text), calls=calls)


def _section(segs: list[Segment], i: int, tags: SectionTags, make: MakeCall, calls: list[ToolCall]) -> int:
    """Read calls from ``segs[i]`` to the section's end; returns the index after it."""
    while i < len(segs):
        seg = segs[i]
        if seg.tag is None and not seg.text.strip():
            i += 1  # whitespace between calls
        elif seg.tag == tags.section_end:
            return i + 1
        elif seg.tag == tags.call_begin:
            head, i = _text_until(segs, i + 1, tags.split, tags.call_begin)
            args, i = _text_until(segs, i, tags.call_end, tags.call_begin)
            calls.append(make(head, args))
        else:
            raise ToolCallError(f"unexpected {seg.tag or 'text'!r} in a tool-call section")
    raise ToolCallError(f"{tags.section_begin} is never closed")


def _text_until(segs: list[Segment], i: int, closing: str, begin: str) -> tuple[str, int]:
    """The text from ``segs[i]`` up to the tag ``closing``, and the index after that tag."""
    parts: list[str] = []
    while i < len(segs):
        seg = segs[i]
        if seg.tag == closing:
            return "".join(parts), i + 1
        if seg.tag is not None:
            raise ToolCallError(f"{seg.tag} before {closing} in a tool call")
        parts.append(seg.text)
        i += 1
    raise ToolCallError(f"a tool call opened with {begin} never reaches {closing}")
