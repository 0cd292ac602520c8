"""The special token ids a conversation step splits output at, looked up in a loaded tokenizer's vocab.

Splitting is by token id, never by a text regex over the output: a model's reasoning may quote
``</think>`` as text, but only the marker token ends it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from eaglefeed.core.tokenizer import HARMONY_TOKENS, TOOL_CALL_TAGS, reasoning_channel, think_pair

_CACHE: weakref.WeakKeyDictionary[Any, SplitMarkers] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, kw_only=True)
class SplitMarkers:
    """Ids of the markers one tokenizer's output is split at (spellings from ``eaglefeed.core.tokenizer``).

    Attributes:
        think_open: the id of the opening think marker, None when the vocab has none.
        think_close: the id of the closing think marker, None when the vocab has none.
        special: ids of special tokens that end a turn (eos and the like; think markers excluded).
        vocab: every single-token spelling of interest → its id (tool-call tags included).
        added: ids of the tokenizer's added tokens: text is split at them before the model's own
            tokenization, so what follows one tokenizes the same whatever precedes it.
        channel_open: a reasoning channel's opening ids (Harmony's ``<|channel|>analysis<|message|>``)
            when the vocab has those (the think pair is then None), else None.
        channel_close: the id that closes that channel's message (``<|end|>``), else None.
    """

    think_open: int | None
    think_close: int | None
    special: frozenset[int]
    vocab: dict[str, int]
    added: frozenset[int] = frozenset()
    channel_open: tuple[int, ...] | None = None
    channel_close: int | None = None

    def single(self, spelling: str) -> int | None:
        """The id of ``spelling`` when it is exactly one token of the vocab, else None."""
        return self.vocab.get(spelling)


def split_markers_for(tokenizer: Any) -> SplitMarkers:
    """The split markers of ``tokenizer`` (cached per tokenizer object: the vocab walk is not free).

    Args:
        tokenizer: a loaded Hugging Face tokenizer (``get_vocab``, ``get_added_vocab``,
            ``all_special_ids``).

    Returns:
        Its think pair (the first of ``THINK_PAIRS`` with both spellings one token each), its
        turn-ending special ids, its single-token tool-call tags and its added-token ids.
    """
    try:
        return _CACHE[tokenizer]
    except (KeyError, TypeError):
        pass
    found = _lookup(tokenizer)
    try:
        _CACHE[tokenizer] = found
    except TypeError:  # not weak-referenceable: recompute next time
        pass
    return found


def _lookup(tokenizer: Any) -> SplitMarkers:
    vocab: dict[str, int] = dict(tokenizer.get_vocab())
    # A reasoning channel (Harmony) wins over think markers the vocab may also hold, as in
    # eaglefeed.dataset.markers: the split and has_reasoning must agree.
    channel = reasoning_channel(vocab)
    think_open, think_close = (None, None) if channel else (think_pair(vocab) or (None, None))
    # Tags that tool-call formats may split at by id, when the vocab has them as one token.
    interesting = {text: vocab[text] for text in TOOL_CALL_TAGS if text in vocab}
    special = frozenset(int(i) for i in getattr(tokenizer, "all_special_ids", []))
    special -= {i for i in (think_open, think_close) if i is not None}
    special -= set(interesting.values())
    # Harmony's tokens are looked up too, but stay special: <|call|> and <|return|> end a turn.
    interesting.update({text: vocab[text] for text in HARMONY_TOKENS if text in vocab})
    added = frozenset(int(i) for i in tokenizer.get_added_vocab().values())
    return SplitMarkers(think_open=think_open, think_close=think_close, special=special, vocab=interesting,
                        added=added, channel_open=channel[0] if channel else None,
                        channel_close=channel[1] if channel else None)
