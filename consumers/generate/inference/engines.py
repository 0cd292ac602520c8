"""Inference engines behind one interface: how a request is sent and a response becomes Generations.

Our sampling params are SGLang's names (``max_new_tokens``, ``sampling_seed``, ...) and stay so
in every record, whatever the engine; each engine translates them on the way out. SGLang answers
``POST /generate``. vLLM answers its native token route ``POST /inference/v1/generate`` (only
with ``--enable-scale-out``); a server without it (403 or 404) is switched, once, to
``POST /v1/completions`` with a token-id prompt and ``return_token_ids``. Both apply the rules of
``eaglefeed.consumers.generate.inference.integrity``; a ``length`` finish with fewer ids than asked (vLLM at
its context length, SGLang's scheduler caps) comes back as a capped Generation (``capped_at``).

Each engine sends its own requests (:func:`post`, through the HTTP client it is given) and parses
the answers; the server pool only picks the server and counts its failures.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from eaglefeed.consumers.generate.inference.aux_states import aux_states
from eaglefeed.consumers.generate.inference.http import raise_for_status
from eaglefeed.consumers.generate.inference.integrity import Generation, check_generation, check_samples
from eaglefeed.consumers.generate.inference.servers import Server, ServerInfo, describe
from eaglefeed.core.errors import ConfigError, FatalInferenceError, RetryableInferenceError

log = logging.getLogger(__name__)

VLLM_NATIVE = "/inference/v1/generate"
VLLM_COMPLETIONS = "/v1/completions"
_VLLM_NAMES = {"max_new_tokens": "max_tokens", "sampling_seed": "seed", "temperature": "temperature",
               "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "stop_token_ids": "stop_token_ids",
               "n": "n", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
               "repetition_penalty": "repetition_penalty", "min_new_tokens": "min_tokens",
               "ignore_eos": "ignore_eos"}
"""Our (SGLang) sampling param → vLLM's; SGLang's text-only settings have no vLLM use and are dropped.

The neutral penalties go too: ``/v1/completions`` takes every omitted one from the model's
``generation_config.json`` (``eaglefeed.consumers.generate.inference.neutral``)."""


@dataclass(frozen=True)
class Call:
    """What one attempt sends: where, and the sampled ids to check against."""

    input_ids: list[int]
    sampling_params: Mapping[str, Any]
    n: int
    rid: str
    vocab_size: int | None
    seeds: tuple[int, ...] | None = None  # each sample's own seed (n > 1), for an engine that needs them
    eos_id: int | None = None  # the prompts' tokenizer's end of sequence: no output runs past it
    capture: bool = False  # ask the server for the hidden states of prompt + output[:-1] (vLLM)


class Engine(Protocol):
    """Send one request to a server and turn its response into checked Generations."""

    name: str

    async def generate(self, *, client: httpx.AsyncClient, server: Server, info: ServerInfo, call: Call,
                       started: float) -> list[Generation]:
        """Send ``call`` to ``server`` through ``client``: ``call.n`` Generations, or an InferenceError.

        Args:
            client: the HTTP client to the inference servers.
            server: the server the pool picked (its ``last_error`` notes why a request failed).
            info: what the server said about itself (engine, served model).
            call: what the attempt sends.
            started: ``time.perf_counter()`` when the attempt began (for the latency).
        """
        ...


class SGLangEngine:
    """SGLang's native ``POST /generate`` (and eaglefeed's stand-in)."""

    name = "sglang"

    async def generate(self, *, client: httpx.AsyncClient, server: Server, info: ServerInfo, call: Call,
                       started: float) -> list[Generation]:
        """Send ``call`` as one ``/generate`` body with ``input_ids`` (see :meth:`Engine.generate`)."""
        seeds = call.seeds if call.n > 1 and info.deterministic and call.seeds else None
        body: dict[str, Any]
        if seeds is None:
            body = {"input_ids": call.input_ids, "sampling_params": call.sampling_params, "rid": call.rid,
                    "stream": False}
            if call.capture:  # the aux layers of prompt + output[:-1] (--enable-return-aux-hidden-states)
                body["return_hidden_states"] = True
        else:
            # A deterministic SGLang gives the n samples of one request its one sampling_seed
            # (each copy of the parent's params; srt/sampling/sampling_batch_info.py), so they
            # would be identical: send n copies of the prompt as a batch, each with its own seed.
            body = {"input_ids": [call.input_ids] * call.n, "rid": call.rid, "stream": False,
                    "sampling_params": [{**call.sampling_params, "n": 1, "sampling_seed": seed}
                                        for seed in seeds]}
        resp = await post(client=client, server=server, path="/generate", body=body)
        raise_for_status(resp)
        payload = _json(resp, server)
        gens = check_samples(payload, call.n, call.input_ids, call.sampling_params,
                             vocab_size=call.vocab_size, endpoint=server.url, latency=_since(started))
        if call.capture:
            meta = payload.get("meta_info") if isinstance(payload, dict) else None
            states = aux_states(meta if isinstance(meta, dict) else {}, prompt_len=len(call.input_ids),
                                output_len=len(gens[0].output_ids))
            # the worker writes this file itself, into the store, under the request's own name
            return [dataclasses.replace(gens[0], capture_path=f"{call.rid}.safetensors", states=states)]
        if seeds is None:
            return gens
        return [dataclasses.replace(gen, sampling_seed=seed) for gen, seed in zip(gens, seeds, strict=True)]


class VllmEngine:
    """vLLM's token route, or its completions route when the server lacks the token route."""

    name = "vllm"

    async def generate(self, *, client: httpx.AsyncClient, server: Server, info: ServerInfo, call: Call,
                       started: float) -> list[Generation]:
        """Send ``call`` on the native route, falling back to ``/v1/completions`` for good on 403/404.

        See :meth:`Engine.generate` for the arguments.
        """
        params = vllm_sampling_params(call.sampling_params)
        # the capture connector saves prompt + output[:-1] from this very pass (docs/DEPLOY.md)
        capture = {"kv_transfer_params": {"include_output_tokens": True}} if call.capture else {}
        if server.native_route:
            body: dict[str, Any] = {"request_id": call.rid, "token_ids": call.input_ids,
                                    "sampling_params": params, **capture}
            resp = await post(client=client, server=server, path=VLLM_NATIVE, body=body)
            if resp.status_code in (403, 404):
                log.warning("server %s has no %s (HTTP %d; start vLLM with --enable-scale-out): "
                            "using %s with token ids", server.url, VLLM_NATIVE, resp.status_code,
                            VLLM_COMPLETIONS)
                server.native_route = False
            else:
                raise_for_status(resp)
                return vllm_generations(_json(resp, server), call, endpoint=server.url,
                                        latency=_since(started))
        body = {"model": info.served_model, "prompt": call.input_ids, "return_token_ids": True,
                "request_id": call.rid, **params, **capture}
        resp = await post(client=client, server=server, path=VLLM_COMPLETIONS, body=body)
        raise_for_status(resp)
        return vllm_generations(_json(resp, server), call, endpoint=server.url, latency=_since(started))


ENGINES_BY_NAME: dict[str, Engine] = {engine.name: engine for engine in (SGLangEngine(), VllmEngine())}
"""Each engine under its name; the names are ``eaglefeed.core.config.ENGINE_NAMES`` (a test checks)."""


async def post(*, client: httpx.AsyncClient, server: Server, path: str,
               body: Mapping[str, Any]) -> httpx.Response:
    """POST ``body`` as compact JSON to ``path`` on ``server``; any HTTP status is returned.

    A failure the pool counts against the server (no response, 5xx, 408, 429) is noted in
    ``server.last_error``, which the pool's ejection and outage lines name.

    Raises:
        RetryableInferenceError: ``timeout``, ``connect`` or ``transport`` when no response came.
    """
    content = json.dumps(body, separators=(",", ":")).encode()
    try:
        resp = await client.post(f"{server.url}{path}", content=content,
                                 headers={"Content-Type": "application/json"})
    except httpx.TransportError as exc:
        server.last_error = describe(exc)
        kind = ("timeout" if isinstance(exc, httpx.TimeoutException)
                else "connect" if isinstance(exc, httpx.ConnectError) else "transport")
        raise RetryableInferenceError(kind, f"{server.url}: {server.last_error}") from exc
    if resp.status_code >= 500 or resp.status_code in (408, 429):
        server.last_error = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
    return resp


def vllm_sampling_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Our sampling params under vLLM's names (``max_new_tokens`` → ``max_tokens``, ...)."""
    return {_VLLM_NAMES[k]: v for k, v in params.items() if k in _VLLM_NAMES}


def vllm_generations(payload: object, call: Call, *, endpoint: str, latency: float) -> list[Generation]:
    """Check a vLLM response (token route or completions) and map each choice to a Generation.

    ``finish_reason`` is ``stop`` or ``length``; ``stop_reason`` is the stop id (an int, which must
    be the last id), a stop string, or null on the model's own EOS, which is then the last id and
    recorded as the matched stop, as SGLang reports it. ``usage`` counts all choices together.

    A choice's ``weight_versions`` (the token route) give the Generation's weight version; more
    than one (weights updated mid-sequence) are joined with ``+``.

    Raises:
        RetryableInferenceError: ``integrity`` on a broken rule, ``abort`` on an abort finish.
        FatalInferenceError: ``past_eos`` when an output runs past the tokenizer's EOS id.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise RetryableInferenceError("integrity", "response has no choices list")
    choices = payload["choices"]
    usage = payload.get("usage")
    echoed = payload.get("prompt_token_ids")  # the token route echoes the prompt at the top level
    if echoed is not None and echoed != call.input_ids:
        raise RetryableInferenceError("integrity", "the server's prompt_token_ids differ from the ids sent")
    if len(choices) != call.n or not all(isinstance(c, dict) for c in choices) or not isinstance(usage, dict):
        raise RetryableInferenceError("integrity", f"expected {call.n} choices and a usage object")
    choices = sorted(choices, key=lambda c: c.get("index", 0) if type(c.get("index")) is int else 0)
    if [c.get("index", 0) for c in choices] != list(range(call.n)):
        raise RetryableInferenceError("integrity", "choice indexes are not 0..n-1")
    lengths = [len(c["token_ids"]) if isinstance(c.get("token_ids"), list) else -1 for c in choices]
    if call.n > 1 and sum(lengths) == usage.get("completion_tokens"):
        per_choice: list[object] = list(lengths)  # the total checked; each choice's own count is its length
    else:
        per_choice = [usage.get("completion_tokens")] * call.n
    details = usage.get("prompt_tokens_details")
    cached = (details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    gens = [_choice(c, count, usage.get("prompt_tokens"), cached, call, endpoint, latency)
            for c, count in zip(choices, per_choice, strict=True)]
    if not call.capture:
        return gens
    return [dataclasses.replace(gen, capture_path=capture_path(payload, endpoint)) for gen in gens]


def capture_path(payload: Mapping[str, Any], endpoint: str) -> str:
    """The file a capture-enabled vLLM names in ``kv_transfer_params.hidden_states_path``.

    Raises:
        ConfigError: the response names none: the server was started without capture.
    """
    params = payload.get("kv_transfer_params")
    path = params.get("hidden_states_path") if isinstance(params, dict) else None
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{endpoint} returned no hidden_states_path: --hidden-states needs vLLM started "
                          "with eaglefeed's capture connector (docs/DEPLOY.md, \"Hidden states\")")
    return path


def _choice(choice: dict[str, Any], completion_tokens: object, prompt_tokens: object, cached: object,
            call: Call, endpoint: str, latency: float) -> Generation:
    kind = choice.get("finish_reason")
    if kind == "abort":
        raise RetryableInferenceError("abort", f"generation aborted: {choice.get('stop_reason')}")
    if kind not in ("stop", "length"):
        raise RetryableInferenceError("integrity", f"unexpected finish_reason {kind!r}")
    ids = choice.get("token_ids")
    echoed = choice.get("prompt_token_ids")
    if echoed is not None and echoed != call.input_ids:
        raise RetryableInferenceError("integrity", "the server's prompt_token_ids differ from the ids sent")
    matched = choice.get("stop_reason")
    if kind == "stop" and matched is None and isinstance(ids, list) and ids:
        matched = ids[-1]  # the model's EOS: vLLM includes it last and reports no stop_reason
    if call.eos_id is not None and isinstance(ids, list) and call.eos_id in ids[:-1]:
        # vLLM stops on the EOS ids of the model's generation_config.json (with --tokens-only it
        # has no tokenizer's): one that lacks the tokenizer's runs past its end to the length.
        raise FatalInferenceError(
            "past_eos", f"the output runs past the tokenizer's end-of-sequence id {call.eos_id} (at "
            f"{ids.index(call.eos_id)} of {len(ids)}): the server does not stop on it; give the model's "
            "generation_config.json that eos_token_id (or start vLLM with its tokenizer)")
    versions = [v.get("version") for v in choice.get("weight_versions") or () if isinstance(v, dict)]
    distinct = list(dict.fromkeys(str(v) for v in versions if v is not None))
    return check_generation(ids, kind=kind, matched=matched, prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens, cached_tokens=cached,
                            input_ids=call.input_ids, sampling_params=call.sampling_params,
                            vocab_size=call.vocab_size, endpoint=endpoint, latency=latency,
                            weight_version="+".join(distinct) or None)


def _json(resp: httpx.Response, server: Server) -> Any:
    try:
        return json.loads(resp.content)
    except ValueError as exc:
        raise RetryableInferenceError("bad_response", f"{server.url}: body is not JSON") from exc


def _since(started: float) -> float:
    return time.perf_counter() - started
