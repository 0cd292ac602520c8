"""Check that every server tokenizes as the prompts' tokenizer does, before a prompt of it is sent.

The prompts' ``input_ids`` were rendered with ``tokenizer_id``; a server whose model reads another
vocabulary (a shuffled one, another model's) would answer them with fluent nonsense that passes
every other check. When the worker first loads a tokenizer (``VocabSizes``), it sends a few
probe texts (plain text, unicode, the tokenizer's special tokens such as eos and the think
markers) to each server's ``POST /tokenize`` (``{"prompt", "add_special_tokens": false}``,
the same body for SGLang 0.5.23 and vLLM) and compares the ids with its own encoding:

- a server that disagrees is taken out of rotation for good, in one line naming it, the tokenizer
  and the first differing probe;
- when every server disagrees, :class:`ConfigError` stops the worker in one line before a
  prompt of that tokenizer is sent (nothing dead-lettered, nothing committed);
- a server without the route (404/405) is accepted, with one warning per server; one that
  cannot answer now (no response, another status, a body without ``tokens``) is kept, with a
  warning naming why.

During the run, 1 prompt in ``--tokenizer-spot-check N`` is checked the same way on its own
text (``eaglefeed.consumers.generate.tokens.spot_check``): disagreements are counted, not refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from eaglefeed.consumers.generate.inference import Server, ServerPool, describe
from eaglefeed.consumers.generate.tokens._chat_probe import chat_body, difference
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer import CONFIG_FILE, REASONING_TOKENS, TOOL_CALL_TAGS, read_json, special_token

log = logging.getLogger(__name__)

PROBES = ("The quick brown fox jumps over the lazy dog; 3 + 4 = 7, isn't it?",
          "Grüße aus Köln — naïve café, 東京タワー, ½ ≤ ∑ ✓ 😀")
"""The text probes every tokenizer is checked with (its special tokens follow)."""
MAX_SPECIALS = 8
"""At most this many special tokens are probed (eos, bos and the markers first)."""
TIMEOUT = 30.0
"""Seconds a server may take to answer one probe."""


@dataclass(frozen=True, kw_only=True)
class LocalTokenizer:
    """The prompts' tokenizer as the worker loaded it.

    Attributes:
        tokenizer_id: the name the prompts give it.
        size: ids it can decode, added tokens included.
        encode: text → ids, without special tokens added (BOS and the like).
        specials: its special tokens worth probing (eos, bos, think and tool-call markers first).
        eos_id: its end-of-sequence id, when it names one (an output must not run past it).
        decode: ids → text, special tokens kept (the run's spot check re-encodes a prompt's
            text on both sides); None: not available.
        render_chat: renders :data:`~eaglefeed.consumers.generate.tokens._chat_probe.SAMPLE_CONVERSATION`
            with its chat template (None from it: it has none); None: the chat is not compared.
    """

    tokenizer_id: str
    size: int
    encode: Callable[[str], list[int]]
    specials: tuple[str, ...]
    eos_id: int | None = None
    decode: Callable[[list[int]], str] | None = None
    render_chat: Callable[[], list[int] | None] | None = None


def fast_tokenizer(tokenizer_id: str, path: Path) -> LocalTokenizer:
    """A ``tokenizer.json`` read with ``tokenizers`` (eos, bos from the tokenizer_config.json beside it)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    added = [t.content for _id, t in sorted(tok.get_added_tokens_decoder().items()) if t.special]
    named: list[str] = []
    eos_id: int | None = None
    config = path.with_name(CONFIG_FILE)
    if config.is_file():
        settings = read_json(config)
        for key in ("eos_token", "bos_token"):
            value = special_token(settings, key)
            if value is not None:
                named.append(value)
                eos_id = tok.token_to_id(value) if key == "eos_token" else eos_id
    return LocalTokenizer(tokenizer_id=tokenizer_id, size=int(tok.get_vocab_size(with_added_tokens=True)),
                          encode=lambda text: list(tok.encode(text, add_special_tokens=False).ids),
                          specials=_pick_specials(named, added), eos_id=eos_id,
                          decode=lambda ids: str(tok.decode(ids, skip_special_tokens=False)))


def slow_tokenizer(tokenizer_id: str, tok: Any) -> LocalTokenizer:
    """A tokenizer ``transformers`` loaded (one without tokenizer.json, e.g. Kimi's tiktoken one)."""
    named = [t for t in (getattr(tok, "eos_token", None), getattr(tok, "bos_token", None))
             if isinstance(t, str)]
    added = [str(t) for t in getattr(tok, "all_special_tokens", [])]
    eos = getattr(tok, "eos_token_id", None)
    return LocalTokenizer(tokenizer_id=tokenizer_id, size=len(tok),
                          encode=lambda text: [int(i) for i in tok.encode(text, add_special_tokens=False)],
                          specials=_pick_specials(named, added), eos_id=eos if isinstance(eos, int) else None,
                          decode=lambda ids: str(tok.decode(ids, skip_special_tokens=False)))


def _served(servers: Sequence[Server]) -> str:
    """`` (the servers serve M1, M2)`` when their info names their models, else nothing."""
    models = sorted({s.info.model_path for s in servers if s.info is not None and s.info.model_path})
    return f" (the servers given serve {', '.join(models)})" if models else ""


def _pick_specials(named: Iterable[str], added: Sequence[str]) -> tuple[str, ...]:
    markers = [m for m in (*REASONING_TOKENS, *TOOL_CALL_TAGS) if m in added]
    picked = dict.fromkeys(t for t in (*named, *markers, *added) if t)
    return tuple(picked)[:MAX_SPECIALS]


class TokenizerAgreement:
    """Ask each server's ``/tokenize`` whether it encodes as a loaded tokenizer does.

    Args:
        pool: the servers (a disagreeing one is refused through :meth:`ServerPool.refuse`).
        client: the HTTP client (the worker's: its API key header included).
    """

    def __init__(self, *, pool: ServerPool, client: httpx.AsyncClient) -> None:
        self.pool = pool
        self.client = client
        self._no_route: set[str] = set()  # servers already warned about

    async def check(self, local: LocalTokenizer) -> None:
        """Refuse the servers that disagree with ``local``.

        Raises:
            ConfigError: no server is left in the pool (each refused, now or for another tokenizer).
        """
        probes = (*PROBES, *local.specials)
        expected = [local.encode(text) for text in probes]
        servers = [s for s in self.pool.servers if s.refused is None]
        found = await asyncio.gather(*(self._differs(s, probes, expected) for s in servers))
        mismatches = [(s, why) for s, why in zip(servers, found, strict=True) if why is not None]
        agreeing = [s for s, why in zip(servers, found, strict=True) if why is None]
        chat = await self._chat_differences(agreeing, local)
        mismatches += chat.differ
        if len(mismatches) == len(servers):
            said = "; ".join(f"{s.url}: {why}" for s, why in mismatches) or "every server was refused already"
            raise ConfigError(f"no server tokenizes as {local.tokenizer_id!r}, the tokenizer the prompts "
                              f"were rendered with ({said}); point the worker (--sglang-url) at a server "
                              f"that serves the prompts' model{_served(servers)}, or produce the prompts "
                              f"again with the server's tokenizer (eaglefeed produce --tokenizer); nothing "
                              f"was dead-lettered, a restart resumes here")
        for server, why in mismatches:
            reason = f"it tokenizes differently from {local.tokenizer_id!r}, named by the prompts: {why}"
            log.error("server %s: %s; out of rotation for good", server.url, reason)
            self.pool.refuse(server, reason=reason)
        if not mismatches:
            log.info("the servers tokenize as %s (%d probes; the chat template's rendering compared on %d "
                     "of %d)", local.tokenizer_id, len(probes), chat.compared, len(servers))

    async def _chat_differences(self, servers: Sequence[Server], local: LocalTokenizer) -> _ChatOutcome:
        """The servers whose template renders the sample conversation otherwise than ``local``'s."""
        if local.render_chat is None or not servers:
            return _ChatOutcome()
        there = await asyncio.gather(*(self._render_there(s) for s in servers))
        asked = [(s, ids) for s, ids in zip(servers, there, strict=True) if ids is not None]
        if not asked:
            return _ChatOutcome()
        here = await asyncio.to_thread(local.render_chat)
        if here is None:
            log.info("tokenizer %s has no chat template: the servers' chat rendering is not compared",
                     local.tokenizer_id)
            return _ChatOutcome()
        differ = [(s, f"its chat template is not the prompts': {difference(ids, here, local.decode)}")
                  for s, ids in asked if ids != here]
        return _ChatOutcome(differ=differ, compared=len(asked))

    async def _render_there(self, server: Server) -> list[int] | None:
        """``server``'s rendering of the sample conversation (None: it renders no chat in /tokenize)."""
        try:
            resp = await self.client.post(f"{server.url}/tokenize", timeout=TIMEOUT, json=chat_body())
            tokens = resp.json().get("tokens") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.debug("server %s: no chat rendering from /tokenize (%r)", server.url, exc)
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            log.debug("server %s renders no chat in /tokenize (HTTP %d): its template is not compared",
                      server.url, resp.status_code)
            return None
        return tokens

    async def agrees(self, server: Server, text: str, expected: Sequence[int]) -> bool | None:
        """Whether ``server`` encodes ``text`` as ``expected`` (None: it could not be asked now)."""
        try:
            return await self._tokenize(server, text) == list(expected)
        except _Unchecked:
            return None

    async def _differs(self, server: Server, probes: Sequence[str],
                       expected: Sequence[list[int]]) -> str | None:
        """The first probe ``server`` encodes otherwise (None: it agrees, or cannot be asked)."""
        for text, ids in zip(probes, expected, strict=True):
            try:
                got = await self._tokenize(server, text)
            except _Unchecked as exc:
                if exc.no_route:
                    if server.url in self._no_route:
                        return None  # said once
                    self._no_route.add(server.url)
                log.warning("server %s: tokenizer not checked against the prompts' (%s); kept in rotation",
                            server.url, exc)
                return None
            if got != ids:
                return f"probe {_short(text)} is {_short(got)} there, {_short(ids)} here"
        return None

    async def _tokenize(self, server: Server, text: str) -> list[int]:
        try:
            resp = await self.client.post(f"{server.url}/tokenize", timeout=TIMEOUT,
                                          json={"prompt": text, "add_special_tokens": False})
        except httpx.HTTPError as exc:
            raise _Unchecked(f"/tokenize gave no response: {describe(exc)}") from exc
        if resp.status_code in (404, 405):
            raise _Unchecked(f"it has no /tokenize (HTTP {resp.status_code})", no_route=True)
        if resp.status_code != 200:
            raise _Unchecked(f"/tokenize answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            tokens = resp.json()["tokens"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _Unchecked(f"/tokenize answered without tokens: {resp.text[:200]}") from exc
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise _Unchecked(f"/tokenize answered tokens that are not ids: {str(tokens)[:200]}")
        return tokens


@dataclass
class _ChatOutcome:
    """The servers whose chat rendering differs (with why), and how many rendered it at all."""

    differ: list[tuple[Server, str]] = field(default_factory=list)
    compared: int = 0


class _Unchecked(Exception):
    """A server's ``/tokenize`` gave no usable answer (``no_route``: it has none)."""

    def __init__(self, message: str, *, no_route: bool = False) -> None:
        super().__init__(message)
        self.no_route = no_route


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


__all__ = ["LocalTokenizer", "TokenizerAgreement", "fast_tokenizer", "slow_tokenizer"]
