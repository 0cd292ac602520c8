"""During the run, 1 prompt in N asks the servers whether they still tokenize as the prompts' tokenizer.

The start-up check (``eaglefeed.consumers.generate.tokens.agreement``) probes a few fixed texts once per
tokenizer; a server can still differ later (restarted with another model behind the same URL, a
gateway that moved the request to a server of another model) or only on text the probes miss.
So every ``--tokenizer-spot-check N``-th prompt a worker takes is decoded with the prompts'
tokenizer (special tokens kept) and that text is sent to each server in rotation's
``POST /tokenize``; the server's ids must equal the local encoding of the same text. Both sides
encode one text, so a tokenizer whose decode → encode does not give back the rendered ids still
agrees with itself. The outcome per server is counted in
``eaglefeed_worker_tokenizer_spot_checks_total{outcome=agree|disagree|unchecked}``; a disagreement
is also logged (once per server), but the server is not refused: the start-up check decides that,
and a sampled check is evidence to look at, not a reason to stop mid-run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from eaglefeed.consumers.generate.tokens.vocab import VocabSizes

log = logging.getLogger(__name__)

OUTCOMES = ("agree", "disagree", "unchecked")
"""The labels of one server's answer to one spot check."""


class SpotCheck:
    """Check 1 prompt in ``every`` against the servers' ``/tokenize``.

    Args:
        vocab: the worker's tokenizers (the ones the prompts name, loaded by ``size_for``) and the
            agreement check that asks the servers.
        every: check every ``every``-th prompt; 0: never.
        on_outcome: called with one of :data:`OUTCOMES` per server asked (the metric).
    """

    def __init__(self, *, vocab: VocabSizes, every: int, on_outcome: Callable[[str], None]) -> None:
        self.vocab = vocab
        self.every = every
        self.on_outcome = on_outcome
        self._seen = 0
        self._warned: set[str] = set()  # servers whose disagreement was logged already

    async def check(self, prompt: dict[str, Any]) -> None:
        """Spot-check ``prompt`` when it is the ``every``-th; never raises (the prompt goes on)."""
        if self.every <= 0:
            return
        self._seen += 1
        if self._seen % self.every:
            return
        agreement = self.vocab.agreement
        local = self.vocab.local(prompt["tokenizer_id"])
        if agreement is None or local is None or local.decode is None:
            return  # --vocab-size N or off loads no tokenizer: nothing to compare with
        servers = [s for s in agreement.pool.servers if s.refused is None and s.healthy]
        try:
            text = local.decode(list(prompt["input_ids"]))
            expected = local.encode(text)
            answers = await asyncio.gather(*(agreement.agrees(s, text, expected) for s in servers))
        except Exception as exc:  # a check must never fail the prompt it samples
            log.debug("tokenizer spot check of %s not made: %r", prompt["prompt_id"], exc)
            answers = [None] * len(servers)
        for server, agrees in zip(servers, answers, strict=True):
            outcome = "unchecked" if agrees is None else "agree" if agrees else "disagree"
            self.on_outcome(outcome)
            if outcome == "disagree" and server.url not in self._warned:
                self._warned.add(server.url)
                log.warning("server %s tokenizes prompt %s otherwise than %r, named by the prompts "
                            "(spot check; counted in eaglefeed_worker_tokenizer_spot_checks_total, "
                            "logged once per server)", server.url, prompt["prompt_id"], local.tokenizer_id)


__all__ = ["OUTCOMES", "SpotCheck"]
