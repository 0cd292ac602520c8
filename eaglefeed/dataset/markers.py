"""Token ids that flag reasoning and tool calls, looked up from a tokenizer.json without the network."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from eaglefeed.core.markers import REASONING_TOKENS, TOOL_CALL_TOKENS
from eaglefeed.core.tokenizer_files import tokenizer_file

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class FlagMarkers:
    """Ids whose presence in an output flags reasoning or a tool call; None when unknown.

    Attributes:
        reasoning: ids of every think spelling of ``eaglefeed.core.markers.THINK_PAIRS`` the
            tokenizer has (the ``has_reasoning`` column).
        tool_call: ids of the ``TOOL_CALL_TOKENS`` the tokenizer has (the ``has_tool_call`` column).
    """

    reasoning: tuple[int, ...] | None = None
    tool_call: tuple[int, ...] | None = None


@lru_cache(maxsize=64)
def flag_markers_for(tokenizer_id: str) -> FlagMarkers:
    """The flag markers of ``tokenizer_id``: a local tokenizer directory or a Hugging Face id.

    Only files already on disk are read (``eaglefeed.core.tokenizer_files``); a tokenizer that is
    not there leaves the two flag columns empty rather than fetching it.

    Args:
        tokenizer_id: the records' ``tokenizer_id``.

    Returns:
        The ids of the marker spellings its tokenizer.json holds, or an empty ``FlagMarkers``.
    """
    path = tokenizer_file(tokenizer_id)
    if path is None:
        log.warning("no tokenizer.json for %s on this host: has_reasoning/has_tool_call left empty",
                    tokenizer_id)
        return FlagMarkers()
    try:
        vocab = _special_vocab(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot read %s (%s): has_reasoning/has_tool_call left empty", path, exc)
        return FlagMarkers()
    return FlagMarkers(reasoning=tuple(vocab[t] for t in REASONING_TOKENS if t in vocab),
                       tool_call=tuple(vocab[t] for t in TOOL_CALL_TOKENS if t in vocab))


def _special_vocab(path: Path) -> dict[str, int]:
    """Token → id for the added tokens and the marker strings found in the model vocab."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = {tok["content"]: int(tok["id"]) for tok in data.get("added_tokens", [])}
    model_vocab = data.get("model", {}).get("vocab")
    if isinstance(model_vocab, dict):
        for token in (*REASONING_TOKENS, *TOOL_CALL_TOKENS):
            if token not in vocab and token in model_vocab:
                vocab[token] = int(model_vocab[token])
    return vocab
