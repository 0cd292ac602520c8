"""HTTP error statuses → InferenceErrors, for every engine: retryable, configuration, or dead letter.

SGLang answers ``{"error": {"message"}}`` (its 0.5.23 schema gate: ``{"error": "<text>"}``);
vLLM ``{"error": {"message", "type", "code"}}`` (older:
``{"object": "error", "message", ...}``); both messages are carried into the error.
"""

from __future__ import annotations

import httpx

from eaglefeed.core.errors import ConfigError, FatalInferenceError, RetryableInferenceError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
CONFIG_STATUS = frozenset({401, 403, 404, 405})
"""Not a verdict on one prompt but on the set-up (key, URL): the worker stops instead of
dead-lettering its whole backlog."""


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
