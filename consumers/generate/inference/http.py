"""The worker's HTTP client (the httpx API over aiohttp's transport) and its error statuses → InferenceErrors.

httpx's own transport (httpcore) costs milliseconds of CPU per request at high concurrency: its
pool walks every connection on each request, and its pure-Python HTTP parser is slow. The
``httpx-aiohttp`` transport keeps httpx's client, errors and MockTransport seam for tests, and
sends through aiohttp's C-accelerated client instead (see ``bench/worker_cpu.py``).

Error statuses are translated the same for every engine: retryable, configuration, or dead letter.
SGLang answers ``{"error": {"message"}}`` (its 0.5.23 schema gate: ``{"error": "<text>"}``);
vLLM ``{"error": {"message", "type", "code"}}`` (older: ``{"object": "error", "message", ...}``);
both messages are carried into the error.
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport

from eaglefeed.core.errors import ConfigError, FatalInferenceError, RetryableInferenceError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
CONFIG_STATUS = frozenset({401, 403, 404, 405})
"""Not a verdict on one prompt but on the set-up (key, URL): the worker stops instead of
dead-lettering its whole backlog."""


def make_http_client(*, connections: int, timeout: httpx.Timeout,
                     headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with up to ``connections`` keep-alive connections over aiohttp."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(transport=AiohttpTransport(limits=limits), timeout=timeout, headers=headers)



def raise_for_status(resp: httpx.Response) -> None:
    """Translate an HTTP error status into the matching InferenceError."""
    if resp.status_code < 400:
        return
    message = _error_message(resp)
    kind = f"http_{resp.status_code}"
    if resp.status_code >= 500 or resp.status_code in RETRYABLE_STATUS:
        raise RetryableInferenceError(kind, message, retry_after=_retry_after(resp))
    if resp.status_code in CONFIG_STATUS:
        raise ConfigError(f"{resp.request.url} answered HTTP {resp.status_code} ({message}); "
                          "check --sglang-url and --api-key")
    raise FatalInferenceError(kind, message)


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers.get("Retry-After", ""))
    except ValueError:
        return None


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:1000]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "message" in body:
            return str(body["message"])
    return str(body)[:1000]
