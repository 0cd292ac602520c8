"""Token ids that flag reasoning and tool calls, looked up from the tokenizer's files without the network.

A tokenizer.json names them (added tokens, else the model vocab); a tokenizer without one (Kimi's
tiktoken kind) names its special tokens in tokenizer_config.json's ``added_tokens_decoder``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from eaglefeed.core.markers import REASONING_CHANNELS, REASONING_TOKENS, TOOL_CALL_TOKENS, reasoning_channel
from eaglefeed.core.tokenizer_files import tokenizer_file

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class FlagMarkers:
    """Ids whose presence in an output flags reasoning or a tool call; None when unknown.

    Attributes:
        reasoning: ids of every think spelling of ``eaglefeed.core.markers.THINK_PAIRS`` the
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

    Only files already on disk are read (``eaglefeed.core.tokenizer_files``); a tokenizer that is
    not there leaves the two flag columns empty rather than fetching it.

    Args:
        tokenizer_id: the records' ``tokenizer_id``.

    Returns:
        The ids of the marker spellings its tokenizer.json (or, without one, its
        tokenizer_config.json's ``added_tokens_decoder``) holds, or an empty ``FlagMarkers``.
    """
    path = tokenizer_file(tokenizer_id)
    read = _special_vocab
    if path is None and (path := _added_tokens_config(tokenizer_id)) is not None:
        read = _config_vocab
    if path is None:
        log.warning("no tokenizer.json for %s on this host: has_reasoning/has_tool_call left empty",
                    tokenizer_id)
        return FlagMarkers()
    try:
        vocab = read(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot read %s (%s): has_reasoning/has_tool_call left empty", path, exc)
        return FlagMarkers()
    # A reasoning channel (Harmony) wins over think spellings, as in the conversation split.
    channel = reasoning_channel(vocab)
    reasoning = () if channel else tuple(vocab[t] for t in REASONING_TOKENS if t in vocab)
    return FlagMarkers(reasoning=reasoning, tool_call=tuple(vocab[t] for t in TOOL_CALL_TOKENS if t in vocab),
                       reasoning_sequence=channel[0] if channel else None)


def _special_vocab(path: Path) -> dict[str, int]:
    """Token → id for the added tokens and the marker strings found in the model vocab."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = {tok["content"]: int(tok["id"]) for tok in data.get("added_tokens", [])}
    model_vocab = data.get("model", {}).get("vocab")
    if isinstance(model_vocab, dict):
        channels = [t for opening, closing in REASONING_CHANNELS for t in (*opening, closing)]
        for token in (*REASONING_TOKENS, *TOOL_CALL_TOKENS, *channels):
            if token not in vocab and token in model_vocab:
                vocab[token] = int(model_vocab[token])
    return vocab


def _added_tokens_config(tokenizer_id: str) -> Path | None:
    """The tokenizer_config.json of ``tokenizer_id`` if it lists ``added_tokens_decoder``, else None."""
    path = tokenizer_file(tokenizer_id, "tokenizer_config.json")
    try:
        listed = path is not None and "added_tokens_decoder" in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return path if listed else None


def _config_vocab(path: Path) -> dict[str, int]:
    """Token → id of the added tokens a tokenizer_config.json lists (``{"id": {"content": ...}}``)."""
    decoder = json.loads(path.read_text(encoding="utf-8"))["added_tokens_decoder"]
    return {tok["content"]: int(key) for key, tok in decoder.items()}
