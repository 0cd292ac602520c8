"""The vocabulary size that output ids are checked against.

SGLang's API does not report it, so it comes from ``--vocab-size N`` when given, or else from
the tokenizer each PromptRecord names (``tokenizer_id``, the producer's ``--tokenizer``),
loaded once per id: a ``tokenizer.json`` on this host (``eaglefeed.core.tokenizer_files``: the
directory, or the Hugging Face cache) is read with ``tokenizers``; anything else goes through
``transformers.AutoTokenizer`` (hub ids obey ``HF_HUB_OFFLINE``; a tokenizer with code of its own,
like Kimi's, only with ``--trust-remote-code``, else the worker stops with one line naming the
flag). The size is
``len(tokenizer)``, added tokens included: an id past it cannot be decoded by the tokenizer
the training run will use. A tokenizer that cannot be loaded is a configuration problem, not
a property of the prompt: :meth:`VocabSizes.size_for` raises :class:`ConfigError`, the worker
stops with one line and that prompt is neither dead-lettered nor committed, so a restart with
``--vocab-size N`` (or with the tokenizer present) resumes at it.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from eaglefeed.core.errors import ConfigError
from eaglefeed.core.remote_code import RemoteCodeError, load_tokenizer
from eaglefeed.core.tokenizer_files import tokenizer_file

log = logging.getLogger(__name__)


class VocabSizes:
    """Resolve the vocabulary size for a prompt's tokenizer.

    Args:
        fixed: a size that applies to every prompt (``--vocab-size N``), or None.
        from_tokenizer: when ``fixed`` is None, load the record's tokenizer; when False the
            vocabulary check is off.
        trust_remote_code: a tokenizer may run its own Python code (``--trust-remote-code``).
    """

    def __init__(self, *, fixed: int | None, from_tokenizer: bool, trust_remote_code: bool = False) -> None:
        self.fixed = fixed
        self.from_tokenizer = from_tokenizer
        self.trust_remote_code = trust_remote_code
        self._sizes: dict[str, asyncio.Future[int]] = {}

    async def size_for(self, tokenizer_id: str) -> int | None:
        """The bound for ``tokenizer_id`` (None when the check is off).

        Raises:
            ConfigError: the tokenizer cannot be loaded (the worker must stop, not dead-letter).
        """
        if self.fixed is not None or not self.from_tokenizer:
            return self.fixed
        future = self._sizes.get(tokenizer_id)
        if future is None:
            future = asyncio.ensure_future(asyncio.to_thread(_load_size, tokenizer_id,
                                                             trust_remote_code=self.trust_remote_code))
            self._sizes[tokenizer_id] = future
        try:
            return await asyncio.shield(future)
        except RemoteCodeError:
            raise
        except Exception as exc:  # whatever the loader raises, the answer is "unknown"
            raise ConfigError(f"cannot load tokenizer {tokenizer_id!r}, named by the prompts, to learn its "
                              f"vocabulary size ({exc}); make it available to the worker or pass "
                              f"--vocab-size N (nothing was dead-lettered; a restart resumes here)") from exc


def _load_size(tokenizer_id: str, *, trust_remote_code: bool) -> int:
    path = Path(tokenizer_id)
    if not path.exists() and (path.is_absolute() or tokenizer_id.startswith(".")):
        raise FileNotFoundError(f"no tokenizer directory {tokenizer_id}")  # not a hub id either
    found = tokenizer_file(tokenizer_id)
    if found is not None:
        from tokenizers import Tokenizer

        size = Tokenizer.from_file(str(found)).get_vocab_size(with_added_tokens=True)
    else:
        size = len(load_tokenizer(tokenizer_id, trust_remote_code=trust_remote_code,
                                  hint=" (named by the prompts; or pass --vocab-size N; nothing was "
                                       "dead-lettered, a restart resumes here)"))
    log.info("vocabulary of %s: %d ids", tokenizer_id, size)
    return int(size)
