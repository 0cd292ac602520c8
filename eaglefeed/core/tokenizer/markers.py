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

HARMONY_START = "<|start|>"
HARMONY_CHANNEL = "<|channel|>"
HARMONY_MESSAGE = "<|message|>"
HARMONY_END = "<|end|>"
HARMONY_CALL = "<|call|>"
HARMONY_RETURN = "<|return|>"
HARMONY_CONSTRAIN = "<|constrain|>"
HARMONY_ANALYSIS = "analysis"

REASONING_CHANNELS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((HARMONY_CHANNEL, HARMONY_ANALYSIS, HARMONY_MESSAGE), HARMONY_END),  # OpenAI gpt-oss (Harmony)
)
"""Reasoning kept in a named channel rather than between think markers: (the opening token
sequence, the token that closes the message). Each spelling must be one token of the vocab (in
o200k_harmony ``analysis`` is): the sink's ``has_reasoning`` and the conversation split both look
the sequence up by id, so they agree on which outputs reason."""

TOOL_FORMAT_TAGS: dict[str, tuple[str, ...]] = {
    "hermes": (TOOL_CALL_START, TOOL_CALL_END),
    "kimi_k2": ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
    "deepseek_v3": ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                    "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                    "<｜tool▁sep｜>"),
    "glm45": (TOOL_CALL_START, TOOL_CALL_END, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    "llama3_json": ("<|python_tag|>",),
    "mistral": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
}
"""The tag spellings of each tool-call format (``deepseek_v31`` shares DeepSeek-V3's tags), which a
parser splits at by id when each is one token. Harmony's markers (``HARMONY_*``) are not here: they
also end turns (``<|call|>``, ``<|return|>``), so they stay stop tokens."""
TOOL_FORMAT_TAGS["deepseek_v31"] = TOOL_FORMAT_TAGS["deepseek_v3"]

TOOL_CALL_TAGS: tuple[str, ...] = tuple(dict.fromkeys(t for tags in TOOL_FORMAT_TAGS.values() for t in tags))
"""Every tool-call tag of every format (one spelling once)."""

HARMONY_TOKENS: tuple[str, ...] = (HARMONY_START, HARMONY_CHANNEL, HARMONY_MESSAGE, HARMONY_END, HARMONY_CALL,
                                   HARMONY_RETURN, HARMONY_CONSTRAIN)
"""Harmony's structural tokens (gpt-oss): its parser splits at them by id."""

TOOL_CALL_TOKENS: tuple[str, ...] = (TOOL_CALL_START, "<|python_tag|>", "[TOOL_CALLS]",
                                     "<|tool_calls_section_begin|>", "<｜tool▁calls▁begin｜>",
                                     HARMONY_CALL)
"""An output holding one of these calls a tool (Hermes/Qwen/GLM, Llama 3, Mistral, Kimi-K2, DeepSeek and
Harmony templates)."""


def reasoning_channel(vocab: Mapping[str, int]) -> tuple[tuple[int, ...], int] | None:
    """The ids of the first of :data:`REASONING_CHANNELS` whose spellings are all in ``vocab``.

    Returns:
        (the opening sequence's ids, the closing id), or None when the vocab lacks one of them.
    """
    for opening, closing in REASONING_CHANNELS:
        if all(t in vocab for t in opening) and closing in vocab:
            return tuple(vocab[t] for t in opening), vocab[closing]
    return None


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
