"""A client for SGLang's native ``POST /generate`` that sends token ids and checks what comes back.

Errors are translated at this boundary: connection trouble, timeouts, 408/409/425/429/5xx
and ``abort`` finishes become :class:`RetryableInferenceError`; other 4xx become
:class:`FatalInferenceError`; a response that breaks an integrity rule is retryable too,
and never reaches the training data.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from eaglefeed.errors import FatalInferenceError, InferenceError, RetryableInferenceError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


@dataclass(frozen=True)
class Generation:
    """One checked sample returned by the server."""

    output_ids: list[int]
    finish_reason: str
    matched_stop: int | str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_seconds: float
    endpoint: str


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself, stamped on every record it generates."""

    model_path: str
    engine_version: str


class Endpoint:
    """One inference server and its outstanding request count."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.outstanding = 0
        self.info: ServerInfo | None = None


class InferenceClient:
    """Send generation requests to one or more SGLang servers (least outstanding requests first).

    Args:
        client: the httpx client to use (tests inject one with a MockTransport).
        urls: base URLs of the servers.
        max_attempts: attempts per sample before giving up.
        backoff: base delay in seconds of the exponential backoff (with full jitter).
    """

    def __init__(self, *, client: httpx.AsyncClient, urls: Sequence[str], max_attempts: int = 5,
                 backoff: float = 0.5, backoff_max: float = 30.0) -> None:
        if not urls:
            raise ValueError("at least one server URL is needed")
        self._client = client
        self.endpoints = [Endpoint(u) for u in urls]
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.backoff_max = backoff_max

    async def generate(self, input_ids: list[int], sampling_params: Mapping[str, Any], *,
                       rid_prefix: str, on_retry: Any = None) -> tuple[Generation, ServerInfo, int]:
        """Generate one sample, retrying retryable failures with backoff.

        Returns:
            the checked generation, the info of the server that made it, and the attempts used.

        Raises:
            FatalInferenceError: the server rejected the request for good.
            RetryableInferenceError: still failing after ``max_attempts``.
        """
        for attempt in range(1, self.max_attempts + 1):
            endpoint = min(self.endpoints, key=lambda e: e.outstanding)
            try:
                info = await self._server_info(endpoint)
                gen = await self._request(endpoint, input_ids, sampling_params,
                                          rid=f"{rid_prefix}-{attempt}-{uuid.uuid4().hex[:8]}")
                return gen, info, attempt
            except RetryableInferenceError as exc:
                if attempt == self.max_attempts:
                    raise
                if on_retry is not None:
                    on_retry(exc.kind)
                delay = min(self.backoff_max, self.backoff * 2 ** (attempt - 1))
                await asyncio.sleep(random.uniform(0, delay))
        raise AssertionError("unreachable")

    async def _request(self, endpoint: Endpoint, input_ids: list[int],
                       sampling_params: Mapping[str, Any], *, rid: str) -> Generation:
        body = {"input_ids": input_ids, "sampling_params": dict(sampling_params), "rid": rid,
                "stream": False}
        endpoint.outstanding += 1
        started = time.perf_counter()
        try:
            resp = await self._client.post(f"{endpoint.url}/generate", json=body)
        except httpx.TimeoutException as exc:
            raise RetryableInferenceError("timeout", f"{endpoint.url}: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise RetryableInferenceError("connect", f"{endpoint.url}: {exc!r}") from exc
        finally:
            endpoint.outstanding -= 1
        latency = time.perf_counter() - started
        _raise_for_status(resp)
        try:
            payload = resp.json()
        except ValueError as exc:
            raise RetryableInferenceError("bad_response", f"{endpoint.url}: body is not JSON") from exc
        return check_response(payload, input_ids, sampling_params, endpoint=endpoint.url,
                              latency=latency)

    async def _server_info(self, endpoint: Endpoint) -> ServerInfo:
        if endpoint.info is None:
            try:
                model = await self._client.get(f"{endpoint.url}/model_info")
                server = await self._client.get(f"{endpoint.url}/server_info")
            except httpx.TransportError as exc:
                raise RetryableInferenceError("connect", f"{endpoint.url}: {exc!r}") from exc
            _raise_for_status(model)
            _raise_for_status(server)
            endpoint.info = ServerInfo(model_path=str(model.json().get("model_path", "")),
                                       engine_version=str(server.json().get("version", "")))
        return endpoint.info


def check_response(payload: object, input_ids: list[int], sampling_params: Mapping[str, Any], *,
                   endpoint: str, latency: float) -> Generation:
    """Validate one non-streaming ``/generate`` response for a single prompt.

    Raises:
        RetryableInferenceError: ``integrity`` when the response breaks a rule, ``abort`` on an
            abort finish.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("meta_info"), dict):
        raise RetryableInferenceError("integrity", "response is not a single generation object")
    output_ids = payload.get("output_ids")
    meta = payload["meta_info"]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind == "abort":
        raise RetryableInferenceError("abort", f"generation aborted: {finish.get('message')}")
    if kind not in ("stop", "length"):
        raise RetryableInferenceError("integrity", f"unexpected finish_reason {finish!r}")
    if not isinstance(output_ids, list) or not all(type(t) is int for t in output_ids):
        raise RetryableInferenceError("integrity", "output_ids is not a list of integers")
    if meta.get("completion_tokens") != len(output_ids):
        raise RetryableInferenceError(
            "integrity", f"len(output_ids)={len(output_ids)} != completion_tokens="
            f"{meta.get('completion_tokens')} (prompt-suffix contamination?)")
    if meta.get("prompt_tokens") != len(input_ids):
        raise RetryableInferenceError(
            "integrity", f"prompt_tokens={meta.get('prompt_tokens')} != len(input_ids)={len(input_ids)}")
    if not output_ids:
        raise RetryableInferenceError("integrity", "empty output")
    matched = finish.get("matched")
    if kind == "stop" and type(matched) is int and output_ids[-1] != matched:
        raise RetryableInferenceError("integrity", f"stop on {matched} but the last id is {output_ids[-1]}")
    if len(output_ids) > int(sampling_params.get("max_new_tokens", 1 << 30)):
        raise RetryableInferenceError("integrity", "more output ids than max_new_tokens")
    return Generation(
        output_ids=output_ids, finish_reason=kind, matched_stop=matched,
        prompt_tokens=meta["prompt_tokens"], completion_tokens=meta["completion_tokens"],
        cached_tokens=int(meta.get("cached_tokens") or 0), latency_seconds=latency,
        endpoint=endpoint)


def _raise_for_status(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    message = _error_message(resp)
    kind = f"http_{resp.status_code}"
    if resp.status_code >= 500 or resp.status_code in RETRYABLE_STATUS:
        raise RetryableInferenceError(kind, message)
    raise FatalInferenceError(kind, message)


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:1000]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if "message" in body:
            return str(body["message"])
    return str(body)[:1000]


__all__ = ["Generation", "InferenceClient", "InferenceError", "ServerInfo", "check_response"]
