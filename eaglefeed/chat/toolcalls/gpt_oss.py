"""``gpt_oss`` (OpenAI gpt-oss, the Harmony format): a call is a message to ``functions.NAME``.

A turn is a run of Harmony messages, each ``[<|start|>ROLE]<|channel|>HEADER<|message|>BODY``
closed by ``<|end|>``, ``<|call|>`` or the end of the output (the first message's ``<|start|>
assistant`` is the prompt's). A message whose recipient (``to=functions.NAME``, in the role or
the channel header) is a function is a call, its body the JSON arguments; ``final`` and preamble
(``commentary`` with no recipient) bodies are the content; ``analysis`` after the reasoning the
split took is left out, as the template leaves it out of history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from eaglefeed.chat.toolcalls._base import (
    ParsedContent,
    ParseInput,
    Segment,
    ToolCall,
    ToolCallError,
    joined_text,
    json_object,
    segments,
)
from eaglefeed.core.tokenizer import (
    HARMONY_CALL,
    HARMONY_CHANNEL,
    HARMONY_END,
    HARMONY_MESSAGE,
    HARMONY_RETURN,
    HARMONY_START,
    HARMONY_TOKENS,
)

_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CLOSERS = (HARMONY_END, HARMONY_CALL, HARMONY_RETURN)


@dataclass
class _Message:
    header: list[str] = field(default_factory=list)  # role and channel header text, tags as spelled
    channel: str = ""
    body: list[str] = field(default_factory=list)


def parse(ids: list[int], inp: ParseInput) -> ParsedContent:
    """The calls of a Harmony turn.

    Raises:
        ToolCallError: a message to a tool that is not a function, or arguments that are not JSON.
    """
    segs, _ = segments(ids, HARMONY_TOKENS, inp)
    text: list[str] = []
    calls: list[ToolCall] = []
    for message in _messages(segs, text):
        recipient = _recipient(message)
        if recipient is not None:
            if not recipient.startswith("functions."):
                raise ToolCallError(f"Harmony message to {recipient!r}, which is not a function")
            calls.append(ToolCall(name=recipient[len("functions."):],
                                  arguments=json_object("".join(message.body), "tool call arguments")))
        elif message.channel in ("final", "commentary"):
            text.append("".join(message.body))
    return ParsedContent(text=joined_text(text), calls=calls)


def _messages(segs: list[Segment], loose: list[str]) -> list[_Message]:
    """The messages of ``segs``; text outside any message goes to ``loose``."""
    out: list[_Message] = []
    current: _Message | None = None
    part = "outside"  # where text goes: outside, role, channel, body
    for seg in segs:
        if seg.tag == HARMONY_START:
            current, part = _Message(), "role"
            out.append(current)
        elif seg.tag == HARMONY_CHANNEL:
            if current is None or part == "body":
                current = _Message()
                out.append(current)
            part = "channel"
        elif seg.tag == HARMONY_MESSAGE:
            if current is None or part == "body":
                raise ToolCallError("<|message|> without a message header")
            part = "body"
        elif seg.tag in _CLOSERS:
            current, part = None, "outside"
        elif current is None:
            loose.append(seg.text)
        elif part == "body":
            current.body.append(seg.text)
        else:
            if part == "channel" and seg.tag is None and not current.channel:
                current.channel = seg.text.split()[0] if seg.text.split() else ""
            current.header.append(seg.text)
    return out


def _recipient(message: _Message) -> str | None:
    match = _RECIPIENT.search("".join(message.header))
    return match.group(1) if match else None
