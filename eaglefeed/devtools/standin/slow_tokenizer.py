"""A tokenizer without tokenizer.json (Kimi's tiktoken kind), behind the calls the stand-in makes of one.

The stand-in reads a ``tokenizers.Tokenizer`` from ``tokenizer.json``; a tokenizer that has none
(a tiktoken vocabulary with its class in a ``.py`` file) is loaded with transformers instead
(``--trust-remote-code`` when it runs its own code) and wrapped here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglefeed.core.tokenizer import load_tokenizer


@dataclass(frozen=True)
class SlowEncoding:
    """What ``tokenizers.Encoding`` offers the stand-in: the ids."""

    ids: list[int]


class SlowTokenizer:
    """A transformers tokenizer with the ``tokenizers.Tokenizer`` methods the stand-in calls.

    Args:
        path: the tokenizer directory.
        trust_remote_code: run the tokenizer's own Python code.

    Raises:
        RemoteCodeError: the tokenizer needs its own code and ``trust_remote_code`` is off.
    """

    def __init__(self, path: Path, *, trust_remote_code: bool) -> None:
        self._tok: Any = load_tokenizer(str(path), trust_remote_code=trust_remote_code,
                                        hint=" (eaglefeed stub-sglang --trust-remote-code)")
        self._vocab: dict[str, int] = dict(self._tok.get_vocab())

    def encode(self, text: str, add_special_tokens: bool = True) -> SlowEncoding:
        """The ids of ``text``."""
        return SlowEncoding(ids=list(self._tok.encode(text, add_special_tokens=add_special_tokens)))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids``."""
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """The text of each id list."""
        return [str(t) for t in self._tok.batch_decode(batch, skip_special_tokens=skip_special_tokens)]

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token``, None when the vocabulary has no such token."""
        return self._vocab.get(token)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """Ids in the vocabulary (added tokens included unless told otherwise)."""
        return len(self._tok) if with_added_tokens else int(self._tok.vocab_size)

    def get_added_tokens_decoder(self) -> dict[int, Any]:
        """Id → added token (each has ``.special``)."""
        return dict(self._tok.added_tokens_decoder)
