"""Split one turn's output ids into reasoning, content and the stop token, by token id."""

from __future__ import annotations

from dataclasses import dataclass

from eaglefeed.chat.conversation.markers import SplitMarkers

# Span kinds, in the order they can appear.
REASONING = "reasoning"
THINK_OPEN = "think_open"
THINK_CLOSE = "think_close"
CONTENT = "content"
STOP = "stop"


@dataclass(frozen=True)
class Span:
    """A run of output ids of one kind."""

    kind: str
    ids: list[int]


@dataclass(frozen=True)
class OutputSplit:
    """The output ids in consecutive spans; joined in order they are the output ids again.

    Attributes:
        spans: non-empty spans in output order.
        has_think: whether a think marker was seen (the turn has reasoning, maybe empty).
    """

    spans: list[Span]
    has_think: bool

    def ids_of(self, kind: str) -> list[int]:
        """All ids of spans of ``kind``, in order."""
        return [i for span in self.spans if span.kind == kind for i in span.ids]

    def joined(self) -> list[int]:
        """The output ids, rebuilt from the spans."""
        return [i for span in self.spans for i in span.ids]


def split_output(output_ids: list[int], markers: SplitMarkers) -> OutputSplit:
    """Split ``output_ids`` at the first think block and the final stop token.

    * A trailing special token (eos and the like, not a marker) is the ``stop`` span.
    * When the closing think marker occurs, everything before it is reasoning (an opening marker
      before it is its own span: templates such as Qwen3-Thinking put ``<think>`` in the prompt,
      so the output may hold only the closing one), everything after it is content.
    * When only the opening marker occurs, the reasoning never closed: the ids before it are
      content and everything after it is reasoning.
    * With no marker (or a tokenizer without think markers) everything is content.

    Later think markers stay inside the content: only the first block is reasoning.

    A tokenizer whose reasoning is a channel (Harmony) has no think pair: its first
    ``<|channel|>analysis<|message|>`` opens the reasoning and the next ``<|end|>`` closes it
    (an ``<|end|>`` without that opening closes some other message, not reasoning).
    """
    body = list(output_ids)
    stop: list[int] = []
    if body and body[-1] in markers.special:
        stop = [body.pop()]
    if markers.channel_open is not None and markers.channel_close is not None:
        return _split_channel(body, stop, markers.channel_open, markers.channel_close)
    spans: list[Span] = []
    close = _index(body, markers.think_close)
    open_ = _index(body, markers.think_open)
    if close is not None:
        before = body[:close]
        if open_ is not None and open_ < close:
            _add(spans, REASONING, before[:open_])
            _add(spans, THINK_OPEN, [before[open_]])
            _add(spans, REASONING, before[open_ + 1:])
        else:
            _add(spans, REASONING, before)
        _add(spans, THINK_CLOSE, [body[close]])
        _add(spans, CONTENT, body[close + 1:])
    elif open_ is not None:
        _add(spans, CONTENT, body[:open_])
        _add(spans, THINK_OPEN, [body[open_]])
        _add(spans, REASONING, body[open_ + 1:])
    else:
        _add(spans, CONTENT, body)
    _add(spans, STOP, stop)
    return OutputSplit(spans=spans, has_think=close is not None or open_ is not None)


def _split_channel(body: list[int], stop: list[int], opening: tuple[int, ...], closing: int) -> OutputSplit:
    spans: list[Span] = []
    at = _find(body, opening)
    if at is None:
        _add(spans, CONTENT, body)
    else:
        after = at + len(opening)
        end = _index(body[after:], closing)
        _add(spans, CONTENT, body[:at])
        _add(spans, THINK_OPEN, body[at:after])
        if end is None:
            _add(spans, REASONING, body[after:])
        else:
            _add(spans, REASONING, body[after:after + end])
            _add(spans, THINK_CLOSE, [body[after + end]])
            _add(spans, CONTENT, body[after + end + 1:])
    _add(spans, STOP, stop)
    return OutputSplit(spans=spans, has_think=at is not None)


def _find(ids: list[int], needle: tuple[int, ...]) -> int | None:
    for i in range(len(ids) - len(needle) + 1):
        if tuple(ids[i:i + len(needle)]) == needle:
            return i
    return None


def _index(ids: list[int], token: int | None) -> int | None:
    if token is None:
        return None
    try:
        return ids.index(token)
    except ValueError:
        return None


def _add(spans: list[Span], kind: str, ids: list[int]) -> None:
    if ids:
        spans.append(Span(kind, list(ids)))
