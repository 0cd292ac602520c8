"""Token ids that mark reasoning and tool calls, looked up from a tokenizer without the network."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

REASONING_TOKENS = ("<think>", "</think>")
TOOL_CALL_TOKENS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]")


@dataclass(frozen=True)
class Markers:
    """Ids whose presence in an output flags reasoning or a tool call; None when unknown."""

    reasoning: tuple[int, ...] | None = None
    tool_call: tuple[int, ...] | None = None


@lru_cache(maxsize=64)
def markers_for(tokenizer_id: str) -> Markers:
    """The markers of ``tokenizer_id``: a local tokenizer directory or a Hugging Face id.

    Only files already on disk are read (a local directory, else the Hugging Face cache); a
    tokenizer that is not there leaves the two flag columns empty rather than fetching it.
    """
    path = _tokenizer_json(tokenizer_id)
    if path is None:
        log.warning("no tokenizer.json for %s on this host: has_reasoning/has_tool_call left empty",
                    tokenizer_id)
        return Markers()
    try:
        vocab = _special_vocab(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot read %s (%s): has_reasoning/has_tool_call left empty", path, exc)
        return Markers()
    return Markers(reasoning=tuple(vocab[t] for t in REASONING_TOKENS if t in vocab),
                   tool_call=tuple(vocab[t] for t in TOOL_CALL_TOKENS if t in vocab))


def _tokenizer_json(tokenizer_id: str) -> Path | None:
    try:  # the id comes from a record: it may be no valid path at all (too long, NUL bytes ...)
        local = Path(tokenizer_id) / "tokenizer.json"
        if local.is_file():
            return local
    except (OSError, ValueError):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(tokenizer_id, "tokenizer.json")
    except (ValueError, OSError):  # not a valid repo id
        return None
    return Path(found) if isinstance(found, str) else None


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
