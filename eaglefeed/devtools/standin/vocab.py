"""Load the tokenizer once and precompute what the output model and the server need from it."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from eaglefeed.core.tokenizer import (
    CONFIG_FILE,
    THINK_END,
    THINK_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    read_json,
    special_token,
)
from eaglefeed.devtools.standin.slow_tokenizer import SlowTokenizer

DEFAULT_EOS = ("<|im_end|>", "<|endoftext|>")
TOKEN_POOL_SIZE = 1 << 16

_TOOL_NAMES = (
    "get_weather",
    "search_web",
    "lookup_order",
    "convert_units",
    "read_file",
    "send_email",
)
_ARG_NAMES = ("city", "query", "order_id", "value", "path", "to", "limit", "unit")
_ARG_VALUES = (
    "Paris",
    "42",
    "celsius",
    "/tmp/a.txt",
    "alice@example.com",
    "latest news",
    "3",
    "true",
)


@dataclass(frozen=True, kw_only=True)
class Vocab:
    """Token facts derived from one tokenizer.

    Attributes:
        tokenizer: the loaded ``tokenizers.Tokenizer`` (a :class:`SlowTokenizer` for a tokenizer
            without tokenizer.json, such as Kimi's tiktoken one).
        path: the tokenizer directory.
        vocab_size: number of ids including added tokens.
        eos_id: the end-of-sequence id a response normally ends with.
        special_ids: ids of added special tokens.
        normal_ids: every other id; response bodies are drawn from these.
        whitespace_ids: ids that decode to whitespace only (e.g. newlines).
        newline_ids: the encoding of a single newline.
        think_start: id of ``<think>`` or None.
        think_end: id of ``</think>`` or None.
        tool_call_start: id of ``<tool_call>`` or None.
        tool_call_end: id of ``</tool_call>`` or None.
        tool_call_bodies: pre-encoded JSON tool-call bodies.
        token_pool: a fixed pseudo-random stream of normal ids; bodies are windows of it
            (a slice is far cheaper than one draw per token).
    """

    tokenizer: Tokenizer | SlowTokenizer
    path: Path
    vocab_size: int
    eos_id: int
    special_ids: frozenset[int]
    normal_ids: tuple[int, ...]
    whitespace_ids: frozenset[int]
    newline_ids: tuple[int, ...]
    think_start: int | None
    think_end: int | None
    tool_call_start: int | None
    tool_call_end: int | None
    tool_call_bodies: tuple[tuple[int, ...], ...]
    token_pool: list[int]

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        """Decode ids to text."""
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def encode(self, text: str) -> list[int]:
        """Encode text the way SGLang does for ``text`` prompts (special tokens added)."""
        return self.tokenizer.encode(text, add_special_tokens=True).ids


def load_vocab(path: Path, *, trust_remote_code: bool = False) -> Vocab:
    """Load ``path/tokenizer.json`` (else the tokenizer transformers loads from ``path``); derive the facts.

    Args:
        path: a tokenizer directory (``tokenizer.json``, optionally ``tokenizer_config.json``; or
            a tokenizer without tokenizer.json, e.g. a tiktoken vocabulary and its class).
        trust_remote_code: a tokenizer without tokenizer.json may run its own Python code.

    Raises:
        OSError: when the tokenizer cannot be loaded.
        RemoteCodeError: it runs its own code and ``trust_remote_code`` is off.
        ValueError: when no end-of-sequence token can be found.
    """
    path = Path(path)
    tokenizer: Tokenizer | SlowTokenizer
    if (path / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    else:
        tokenizer = SlowTokenizer(path, trust_remote_code=trust_remote_code)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    special_ids = frozenset(
        token_id for token_id, added in tokenizer.get_added_tokens_decoder().items() if added.special
    )
    normal_ids = tuple(i for i in range(vocab_size) if i not in special_ids)
    pieces = tokenizer.decode_batch([[i] for i in normal_ids], skip_special_tokens=False)
    whitespace_ids = frozenset(
        i for i, text in zip(normal_ids, pieces, strict=True) if text and not text.strip()
    )
    return Vocab(
        tokenizer=tokenizer,
        path=path,
        vocab_size=vocab_size,
        eos_id=_find_eos(tokenizer, path),
        special_ids=special_ids,
        normal_ids=normal_ids,
        whitespace_ids=whitespace_ids,
        newline_ids=tuple(tokenizer.encode("\n", add_special_tokens=False).ids),
        think_start=tokenizer.token_to_id(THINK_START),
        think_end=tokenizer.token_to_id(THINK_END),
        tool_call_start=tokenizer.token_to_id(TOOL_CALL_START),
        tool_call_end=tokenizer.token_to_id(TOOL_CALL_END),
        tool_call_bodies=_encode_tool_bodies(tokenizer),
        token_pool=random.Random(0).choices(normal_ids, k=TOKEN_POOL_SIZE),
    )


def _find_eos(tokenizer: Tokenizer | SlowTokenizer, path: Path) -> int:
    candidates: list[str] = []
    config_file = path / CONFIG_FILE
    if config_file.is_file() and (eos := special_token(read_json(config_file), "eos_token")) is not None:
        candidates.append(eos)
    candidates.extend(DEFAULT_EOS)
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise ValueError(f"no end-of-sequence token found in {path} (tried {candidates})")


def made_up_calls() -> list[tuple[str, dict[str, str]]]:
    """The fixed calls a prompt whose tools cannot be read gets (name, arguments)."""
    return [(name, {_ARG_NAMES[(i + k) % len(_ARG_NAMES)]: _ARG_VALUES[(i * 3 + k) % len(_ARG_VALUES)]
                    for k in range(1 + i % 3)}) for i, name in enumerate(_TOOL_NAMES)]


def _encode_tool_bodies(tokenizer: Tokenizer | SlowTokenizer) -> tuple[tuple[int, ...], ...]:
    bodies = []
    for name, arguments in made_up_calls():
        text = json.dumps({"name": name, "arguments": arguments})
        bodies.append(tuple(tokenizer.encode(text, add_special_tokens=False).ids))
    return tuple(bodies)
