"""Token ids that flag reasoning and tool calls, looked up from the tokenizer's files without the network.

A tokenizer.json names them (added tokens, else the model vocab); a tokenizer without one (Kimi's
tiktoken kind) names its special tokens in tokenizer_config.json's ``added_tokens_decoder``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from eaglefeed.core.tokenizer import (
    CONFIG_FILE,
    REASONING_CHANNELS,
    REASONING_TOKENS,
    TOOL_CALL_TOKENS,
    added_tokens,
    read_json,
    reasoning_channel,
    tokenizer_config,
    tokenizer_file,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class FlagMarkers:
    """Ids whose presence in an output flags reasoning or a tool call; None when unknown.

    Attributes:
        reasoning: ids of every think spelling of ``eaglefeed.core.tokenizer.markers.THINK_PAIRS`` the
            tokenizer has (the ``has_reasoning`` column).
        tool_call: ids of the ``TOOL_CALL_TOKENS`` the tokenizer has (the ``has_tool_call`` column).
        reasoning_sequence: the opening ids of a reasoning channel (Harmony's
            ``<|channel|>analysis<|message|>``) when the tokenizer has them (``reasoning`` is then
            empty): an output holding the sequence has reasoning, as the conversation split says.
    """

    reasoning: tuple[int, ...] | None = None
    tool_call: tuple[int, ...] | None = None
    reasoning_sequence: tuple[int, ...] | None = None


@lru_cache(maxsize=64)
def flag_markers_for(tokenizer_id: str) -> FlagMarkers:
    """The flag markers of ``tokenizer_id``: a local tokenizer directory or a Hugging Face id.

    Only files already on disk are read (``eaglefeed.core.tokenizer.files``); a tokenizer that is
    not there leaves the two flag columns empty rather than fetching it.

    Args:
        tokenizer_id: the records' ``tokenizer_id``.

    Returns:
        The ids of the marker spellings its tokenizer.json (or, without one, its
        tokenizer_config.json's ``added_tokens_decoder``) holds, or an empty ``FlagMarkers``.
    """
    path = tokenizer_file(tokenizer_id)
    config = tokenizer_config(tokenizer_id) if path is None else {}
    if path is None and "added_tokens_decoder" not in config:
        log.warning("no tokenizer.json for %s on this host: has_reasoning/has_tool_call left empty",
                    tokenizer_id)
        return FlagMarkers()
    try:
        vocab = _special_vocab(read_json(path)) if path is not None else added_tokens(config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        where = path or f"the {CONFIG_FILE} of {tokenizer_id}"
        log.warning("cannot read %s (%s): has_reasoning/has_tool_call left empty", where, exc)
        return FlagMarkers()
    # A reasoning channel (Harmony) wins over think spellings, as in the conversation split.
    channel = reasoning_channel(vocab)
    reasoning = () if channel else tuple(vocab[t] for t in REASONING_TOKENS if t in vocab)
    return FlagMarkers(reasoning=reasoning, tool_call=tuple(vocab[t] for t in TOOL_CALL_TOKENS if t in vocab),
                       reasoning_sequence=channel[0] if channel else None)


def _special_vocab(data: dict[str, Any]) -> dict[str, int]:
    """Token → id for the added tokens and the marker strings found in the model vocab of a tokenizer.json."""
    vocab = {tok["content"]: int(tok["id"]) for tok in data.get("added_tokens", [])}
    model_vocab = data.get("model", {}).get("vocab")
    if isinstance(model_vocab, dict):
        channels = [t for opening, closing in REASONING_CHANNELS for t in (*opening, closing)]
        for token in (*REASONING_TOKENS, *TOOL_CALL_TOKENS, *channels):
            if token not in vocab and token in model_vocab:
                vocab[token] = int(model_vocab[token])
    return vocab
