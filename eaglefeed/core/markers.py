"""The one table of marker spellings: the think pairs of known model families and the tool-call tags.

Two lookups read it, each in its own layer: ``eaglefeed.dataset.markers`` (the sink's
``has_reasoning``/``has_tool_call`` flags, from a tokenizer.json on disk) and
``eaglefeed.chat.conversation.markers`` (splitting a turn's output by token id, from a loaded
tokenizer). A new family's spelling is added here, and both see it.
"""

from __future__ import annotations

from collections.abc import Mapping

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

THINK_PAIRS: tuple[tuple[str, str], ...] = (
    (THINK_START, THINK_END),  # Qwen3, DeepSeek-R1, the demo tokenizer
    ("<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    ("◁think▷", "◁/think▷"),  # Moonshot Kimi
)
"""(opening, closing) think markers of known reasoning models, in the order a splitter tries them."""

REASONING_TOKENS: tuple[str, ...] = tuple(spelling for pair in THINK_PAIRS for spelling in pair)
"""An output holding one of these has reasoning (the ``has_reasoning`` column): every think spelling."""

TOOL_CALL_TAGS: tuple[str, ...] = (TOOL_CALL_START, TOOL_CALL_END)
"""The Hermes/Qwen tool-call tags, which a tool-call parser may split at by id when each is one token."""

TOOL_CALL_TOKENS: tuple[str, ...] = (TOOL_CALL_START, "<|python_tag|>", "[TOOL_CALLS]")
"""An output holding one of these calls a tool (Hermes/Qwen, Llama 3 and Mistral templates)."""


def think_pair(vocab: Mapping[str, int]) -> tuple[int, int] | None:
    """The ids of the first pair of :data:`THINK_PAIRS` whose two spellings are both in ``vocab``.

    Args:
        vocab: token spelling → id (a tokenizer's vocab, or the part of it of interest).

    Returns:
        (opening id, closing id), or None when the vocab has no whole pair.
    """
    for open_text, close_text in THINK_PAIRS:
        if open_text in vocab and close_text in vocab:
            return vocab[open_text], vocab[close_text]
    return None
