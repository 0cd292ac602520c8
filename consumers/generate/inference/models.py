"""Check that the servers serve the model the prompts are for, before a prompt of it is sent.

A prompt names its model (PromptRecord v3 ``model``, the producer's ``--model`` or what its
tokenizer names); a server says which it serves on its info routes (SGLang ``model_path``, vLLM
``root``, ``eaglefeed.consumers.generate.inference.detect``). A server of another model shares the
prompts' vocabulary often enough (a fine-tune, a sibling size) that the tokenizer check passes,
and its rows would train the draft on the wrong model. Names compare as
``eaglefeed.core.tokenizer.models`` says (``/models/Qwen3-8B`` is ``Qwen/Qwen3-8B``); an unknown model
on either side matches, with one info line. Each (prompt model, server model) pair is judged
once; a server whose info is read again (after a restart) is judged again on the next prompt:

- a server of another model is taken out of rotation for good, in one line naming both;
- when no server is left, :class:`ConfigError` stops the worker in one line naming both models
  and what to do, before a prompt of that model is sent (nothing dead-lettered, nothing committed).
"""

from __future__ import annotations

import logging

from eaglefeed.consumers.generate.inference.servers import Server, ServerPool
from eaglefeed.core.errors import ConfigError, RetryableInferenceError
from eaglefeed.core.tokenizer import same_model

log = logging.getLogger(__name__)


class ServerModels:
    """Refuse the servers whose model is not the prompts'.

    Args:
        pool: the servers (one of another model is refused through :meth:`ServerPool.refuse`).
    """

    def __init__(self, *, pool: ServerPool) -> None:
        self.pool = pool
        self._judged: set[tuple[str, str]] = set()  # (prompt model, server model) pairs seen
        self._unknown_said = False

    async def check(self, model: str | None) -> None:
        """Refuse the servers that do not serve ``model`` (None or empty: unknown, nothing refused).

        Raises:
            ConfigError: no server is left in the pool (each refused, now or for another reason).
        """
        if not model:
            if not self._unknown_said:
                self._unknown_said = True
                log.info("the prompts name no model (produce knew none: its --tokenizer is not a hub id "
                         "nor a model folder; produce --model NAME records one): the servers' models are "
                         "not checked against them")
            return
        servers = [s for s in self.pool.servers if s.refused is None]
        other: list[tuple[Server, str]] = []
        for server in servers:
            served = await self._served(server)
            if served is None or (model, served) in self._judged:
                continue
            if not same_model(model, served):
                other.append((server, served))
                continue
            self._judged.add((model, served))
            if served:
                log.debug("server %s serves %s, the prompts' model %s", server.url, served, model)
            else:
                log.info("server %s names no model: not checked against the prompts' %s", server.url, model)
        if not other:
            return
        if len(other) == len(servers):
            said = "; ".join(f"{s.url} serves {served}" for s, served in other)
            theirs = other[0][1]
            raise ConfigError(f"no server serves {model}, the model the prompts were produced for ({said}): "
                              f"point the worker (--sglang-url) at a server of {model}, or produce the "
                              f"prompts again for the server's model under another --topic-prefix (eaglefeed "
                              f"produce --model {theirs}); nothing was dead-lettered, a restart resumes here")
        for server, served in other:
            reason = f"it serves {served}, not {model}, the model the prompts were produced for"
            log.error("server %s: %s; out of rotation for good", server.url, reason)
            self.pool.refuse(server, reason=reason)

    async def _served(self, server: Server) -> str | None:
        """The model ``server`` says it serves ("" when it does not say; None: it cannot be asked now)."""
        if server.info is None and server.healthy:  # read again since (a restart): the next request would
            try:
                await self.pool.info(server)
            except RetryableInferenceError:
                return None
        return None if server.info is None else server.info.model_path
