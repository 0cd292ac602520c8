"""The vocabulary size that output ids are checked against.

SGLang's API does not report it, so it comes from ``--vocab-size N`` when given, or else from
the tokenizer each PromptRecord names (``tokenizer_id``, the producer's ``--tokenizer``),
loaded once per id: a ``tokenizer.json`` on this host (``eaglefeed.core.tokenizer.files``: the
directory, or the Hugging Face cache) is read with ``tokenizers``; anything else goes through
``transformers.AutoTokenizer`` (hub ids obey ``HF_HUB_OFFLINE``; a tokenizer with code of its own,
like Kimi's, only with ``--trust-remote-code``, else the worker stops with one line naming the
flag). The size is
``len(tokenizer)``, added tokens included: an id past it cannot be decoded by the tokenizer
the training run will use. A tokenizer that cannot be loaded is a configuration problem, not
a property of the prompt: :meth:`VocabSizes.size_for` raises :class:`ConfigError`, the worker
stops with one line and that prompt is neither dead-lettered nor committed, so a restart with
the tokenizer present resumes at it. The same load is what the
servers' ``/tokenize`` is checked against (``eaglefeed.consumers.generate.tokens.agreement``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import httpx

from eaglefeed.consumers.generate.inference import ServerPool
from eaglefeed.consumers.generate.tokens._chat_probe import render_sample
from eaglefeed.consumers.generate.tokens.agreement import (
    LocalTokenizer,
    TokenizerAgreement,
    fast_tokenizer,
    slow_tokenizer,
)
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer import RemoteCodeError, load_tokenizer, tokenizer_file

log = logging.getLogger(__name__)


class VocabSizes:
    """Resolve the vocabulary size for a prompt's tokenizer (and check the servers agree with it).

    Args:
        fixed: a size that applies to every prompt (``--vocab-size N``), or None.
        from_tokenizer: when ``fixed`` is None, load the record's tokenizer; when False the
            vocabulary check is off.
        trust_remote_code: a tokenizer may run its own Python code (``--trust-remote-code``).
        pool: the servers whose ``/tokenize`` must agree with each loaded tokenizer
            (``eaglefeed.consumers.generate.tokens.agreement``); None: not checked.
        http: the client that asks them (needed with ``pool``).
    """

    def __init__(self, *, fixed: int | None, from_tokenizer: bool, trust_remote_code: bool = False,
                 pool: ServerPool | None = None, http: httpx.AsyncClient | None = None) -> None:
        self.fixed = fixed
        self.from_tokenizer = from_tokenizer
        self.trust_remote_code = trust_remote_code
        self._sizes: dict[str, asyncio.Future[int]] = {}
        self._eos: dict[str, int | None] = {}
        self._local: dict[str, LocalTokenizer] = {}  # what the run's spot check encodes with
        self._agreement = TokenizerAgreement(pool=pool, client=http) if pool and http else None
        if self._agreement is not None and (fixed is not None or not from_tokenizer):
            log.info("the servers' tokenizers are not checked against the prompts': %s",
                     "--vocab-size N loads no tokenizer" if fixed is not None
                     else "the vocabulary check is off")

    async def size_for(self, tokenizer_id: str) -> int | None:
        """The bound for ``tokenizer_id`` (None when the check is off).

        Raises:
            ConfigError: the tokenizer cannot be loaded, or no server tokenizes as it does (the
                worker must stop, not dead-letter).
        """
        if self.fixed is not None or not self.from_tokenizer:
            return self.fixed
        future = self._sizes.get(tokenizer_id)
        if future is None:
            future = asyncio.ensure_future(self._resolve(tokenizer_id))
            self._sizes[tokenizer_id] = future
        return await asyncio.shield(future)

    async def _resolve(self, tokenizer_id: str) -> int:
        try:
            loaded = await asyncio.to_thread(load_local, tokenizer_id,
                                             trust_remote_code=self.trust_remote_code)
        except RemoteCodeError:
            raise
        except Exception as exc:  # whatever the loader raises, the answer is "unknown"
            raise ConfigError(f"cannot load tokenizer {tokenizer_id!r}, named by the prompts, to learn its "
                              f"vocabulary size and check the servers against it ({exc}); make it available "
                              f"to the worker: the same local directory, or the Hub id in the Hugging Face "
                              f"cache (nothing was dead-lettered; a restart resumes here)") from exc
        if self._agreement is not None:
            await self._agreement.check(loaded)
        self._eos[tokenizer_id] = loaded.eos_id
        self._local[tokenizer_id] = loaded
        return loaded.size

    @property
    def agreement(self) -> TokenizerAgreement | None:
        """What asks the servers' ``/tokenize`` (None: the servers' tokenizers are not checked)."""
        return self._agreement

    def local(self, tokenizer_id: str) -> LocalTokenizer | None:
        """The tokenizer :meth:`size_for` loaded for ``tokenizer_id`` (None: none loaded)."""
        return self._local.get(tokenizer_id)

    def eos_id(self, tokenizer_id: str) -> int | None:
        """The end-of-sequence id of a tokenizer :meth:`size_for` loaded (None: unknown or none)."""
        return self._eos.get(tokenizer_id)


def load_local(tokenizer_id: str, *, trust_remote_code: bool) -> LocalTokenizer:
    """Load ``tokenizer_id`` as the worker reads it: its size, its encoder and its special tokens.

    Raises:
        FileNotFoundError: a path that names no directory.
        RemoteCodeError: the tokenizer needs ``--trust-remote-code``.
    """
    path = Path(tokenizer_id)
    if not path.exists() and (path.is_absolute() or tokenizer_id.startswith(".")):
        raise FileNotFoundError(f"no tokenizer directory {tokenizer_id}")  # not a hub id either
    found = tokenizer_file(tokenizer_id)
    if found is not None:
        loaded = fast_tokenizer(tokenizer_id, found)
    else:
        loaded = slow_tokenizer(tokenizer_id, load_tokenizer(
            tokenizer_id, trust_remote_code=trust_remote_code,
            hint=" (named by the prompts; nothing was dead-lettered, a restart resumes here)"))
    log.info("vocabulary of %s: %d ids", tokenizer_id, loaded.size)
    # the chat template is rendered (transformers loaded) only once a server can render chat too
    return replace(loaded, render_chat=lambda: render_sample(tokenizer_id,
                                                             trust_remote_code=trust_remote_code))
