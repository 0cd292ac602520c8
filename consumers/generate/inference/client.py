"""A client for the servers' token routes (SGLang or vLLM: ``engines``) that checks replies.

Errors are translated at this boundary: connection trouble, timeouts, 408/409/425/429/5xx
and ``abort`` finishes become :class:`RetryableInferenceError` and are retried with
exponential backoff and full jitter (at least the server's ``Retry-After``); 401/403/404/405
raise :class:`ConfigError` (wrong key or URL: the worker stops; vLLM's token route answering
403/404 is the exception: the worker switches to ``/v1/completions``); other 4xx become
:class:`FatalInferenceError` carrying the server's message. A response that breaks an
integrity rule (``integrity``) is retryable too, and never reaches the training data.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from eaglefeed.consumers.generate.inference._slots import Slots
from eaglefeed.consumers.generate.inference.adaptive import AutoConcurrency
from eaglefeed.consumers.generate.inference.capture import HiddenStatesCapture, probe_capture_target
from eaglefeed.consumers.generate.inference.engines import ENGINES_BY_NAME, Call
from eaglefeed.consumers.generate.inference.integrity import Generation
from eaglefeed.consumers.generate.inference.servers import ServerInfo, ServerPool
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.errors import FatalInferenceError, InferenceError, RetryableInferenceError

SERVER_FAULTS = frozenset({"connect", "timeout", "transport"})
"""Failure kinds (besides 5xx) that count towards taking a server out of rotation."""


@dataclass(frozen=True)
class Samples:
    """The checked samples of one prompt, the server that made them and the attempts used."""

    generations: list[Generation]
    info: ServerInfo
    attempts: int


class InferenceClient:
    """Send generation requests to a :class:`ServerPool`'s servers, at most ``concurrency`` sequences at once.

    Each attempt goes down, never back up: the pool picks a server, then the server's engine
    (``eaglefeed.consumers.generate.inference.engines``) sends the request through ``http`` and
    checks the answer.
    The defaults of every setting are declared once, in ``eaglefeed.core.config.WorkerConfig``.

    Args:
        pool: the servers.
        http: the HTTP client the engines send the requests through.
        concurrency: sequences (requests × ``n``) in flight at once, over all servers; or the
            per-server limits that ``--concurrency auto`` finds (their sum, as it changes).
        max_attempts: attempts per request before giving up.
        backoff: base delay in seconds of the exponential backoff (full jitter).
        backoff_max: the longest delay between two attempts.
        on_request: called with (outcome, seconds) after every attempt (for metrics).

    Attributes:
        capture: set (once the servers were probed) when the run captures hidden states: every
            request asks for them, and an attempt succeeds only once every sample's file matched.
    """

    def __init__(self, *, pool: ServerPool, http: httpx.AsyncClient, concurrency: int | AutoConcurrency,
                 max_attempts: int, backoff: float, backoff_max: float,
                 on_request: Callable[[str, float], None] | None = None) -> None:
        self.pool = pool
        self._http = http
        self.auto: AutoConcurrency | None = None
        if isinstance(concurrency, AutoConcurrency):
            self.auto, self._slots = concurrency, concurrency.slots
        else:
            self._slots = Slots(total=concurrency)
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._on_request = on_request or (lambda _o, _s: None)
        self.capture: HiddenStatesCapture | None = None

    @property
    def in_flight(self) -> int:
        """Request slots held now: sequences (requests × ``n``) sent or about to be sent."""
        return self._slots.held

    @property
    def window(self) -> int:
        """Sequences worth fetching ahead: twice the slots (the extra half refills a freed slot at once)."""
        return 2 * self._slots.total

    async def generate(self, input_ids: list[int], sampling_params: Mapping[str, Any], *, rid: str,
                       vocab_size: int | None = None, on_retry: Callable[[str], None] | None = None,
                       seeds: tuple[int, ...] | None = None, eos_id: int | None = None,
                       affinity: str | None = None, capture_start: int = 0) -> Samples:
        """Generate the samples of one request (``sampling_params["n"]`` of them, default 1).

        Args:
            input_ids: the prompt, sent verbatim.
            sampling_params: every sampling parameter, explicit.
            rid: prefix of the request ids; each attempt sends a fresh unique ``rid``.
            vocab_size: output ids must lie below it (None: unchecked).
            on_retry: called with the failure kind before each retry.
            seeds: each sample's own ``sampling_seed`` (``n > 1``), sent by an engine that must
                seed the samples one by one (a deterministic SGLang).
            eos_id: the prompts' tokenizer's end-of-sequence id: no output may run past it.
            affinity: the conversation of the prompt (``ServerPool.acquire``): the first attempt
                goes to its server; a retry goes to the least loaded one, since the last failed.
            capture_start: with capture on, the first position whose states are kept (a ``tokens``
                conversation lane's earlier turns hold the rest: ``HiddenStatesCapture.collect``).

        Raises:
            FatalInferenceError: the server rejected the request for good.
            RetryableInferenceError: still failing after ``max_attempts``.
            Either carries ``attempts``, the number of requests sent.
        """
        n = int(sampling_params.get("n", 1))
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with self._slots.hold(n):
                    call = Call(input_ids=input_ids, sampling_params=sampling_params, n=n,
                                rid=f"{rid}-{attempt}-{os.urandom(4).hex()}", vocab_size=vocab_size,
                                seeds=seeds, eos_id=eos_id, capture=self.capture is not None)
                    samples = await self._attempt(call, attempt=attempt,
                                                  affinity=affinity if attempt == 1 else None)
                if self.capture is None:
                    return samples
                # the server's part is done: its slot is free while the files are awaited and checked
                gens = await self.capture.collect(samples.generations, input_ids, start=capture_start)
                return dataclasses.replace(samples, generations=gens)
            except InferenceError as exc:
                if attempt == self.max_attempts or not isinstance(exc, RetryableInferenceError):
                    raise exc.after(attempt) from exc
                if on_retry is not None:
                    on_retry(exc.kind)
                await asyncio.sleep(self.delay(attempt, exc))
        raise AssertionError("unreachable")

    async def start_capture(self, settings: CaptureSettings) -> None:
        """Capture hidden states from now on, once every server passed the probe (``capture.probe_capture``).

        Raises:
            ConfigError: a server does not capture what ``settings`` asks, where the worker reads.
        """
        target = await probe_capture_target(self.pool, self._http, settings)
        self.capture = HiddenStatesCapture(settings=settings, layers=target.layers,
                                           num_hidden_layers=target.depth,
                                           server_uploads=target.server_uploads)

    def delay(self, attempt: int, exc: InferenceError) -> float:
        """Seconds to wait before attempt ``attempt + 1``: full jitter, at least ``Retry-After``."""
        jitter = random.uniform(0, min(self.backoff_max, self.backoff * 2 ** (attempt - 1)))
        return min(self.backoff_max, max(jitter, exc.retry_after or 0.0))

    async def _attempt(self, call: Call, *, attempt: int, affinity: str | None) -> Samples:
        server = await self.pool.acquire(affinity, weight=call.n)
        if self.auto is not None:
            self.auto.acquired(server)
        server_fault = False
        started = time.perf_counter()
        try:
            info = await self.pool.info(server)
            _check_context(call, info, server.url)  # never sent: the server would refuse it for good
            engine = ENGINES_BY_NAME[info.engine]
            gens = await engine.generate(client=self._http, server=server, info=info, call=call,
                                         started=started)
            latency = time.perf_counter() - started
        except InferenceError as exc:
            server_fault = exc.kind in SERVER_FAULTS or exc.kind.startswith("http_5")
            self._on_request(exc.kind, time.perf_counter() - started)
            raise
        finally:
            self.pool.release(server, failed=server_fault, weight=call.n)
        self._on_request("ok", latency)
        server.rows_done += len(gens)
        if self.auto is not None:
            tokens = max((gen.completion_tokens for gen in gens), default=1)
            self.auto.finished(server, seconds=latency, tokens=tokens)
        self.pool.note_weight_versions(server, info, [gen.weight_version for gen in gens])
        return Samples(generations=gens, info=info, attempts=attempt)


def _check_context(call: Call, info: ServerInfo, url: str) -> None:
    """Refuse a request whose prompt + ``max_new_tokens`` exceeds the server's context (docs/INPUTS.md).

    Raises:
        FatalInferenceError: ``context_exceeded``, naming both numbers.
    """
    wanted = call.sampling_params.get("max_new_tokens")
    if info.context_length is None or not isinstance(wanted, int):
        return
    if len(call.input_ids) + wanted > info.context_length:
        raise FatalInferenceError(
            "context_exceeded",
            f"prompt {len(call.input_ids)} tokens + max_new_tokens {wanted} = {len(call.input_ids) + wanted} "
            f"exceeds the context length of {url} ({info.context_length} tokens); not sent (a shorter "
            "--max-prompt-tokens or --max-new-tokens, or a server with a longer context, then --redrive)")


__all__ = ["InferenceClient", "Samples"]
