"""Which engine a server runs, and its version and model, read from its own info routes.

SGLang (and eaglefeed's stand-in) answers ``GET /model_info`` and ``GET /server_info`` (with
``version``), and still their older names ``/get_model_info`` and ``/get_server_info`` (SGLang
0.5.23). The SGLang model gateway (``smg``, formerly sglang-router) answers only the ``get_`` names
(it proxies them to one of its workers) and 404 to the others; it also answers ``GET /readiness``
with a JSON ``status`` (200, or 503 when it has no healthy worker), which SGLang does not serve, and
that is how a gateway is told from an SGLang server. vLLM answers none of these (404) but
``GET /version`` and ``GET /v1/models`` (``owned_by: "vllm"``, ``root`` = the model path, ``id`` =
the served name). ``auto`` tries SGLang's routes first, then vLLM's; a server that is neither stops
the worker with one line, and so does a gateway in front of vLLM (``GATEWAY_WITHOUT_SGLANG``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from eaglefeed.core.errors import ConfigError, RetryableInferenceError

# smg 1.13 in front of vLLM over HTTP (measured with the real vLLM of `make test-engine`): it proxies
# /generate and /get_model_info to vLLM (404 there), serves no /version and no
# /inference/v1/generate, and its own /v1/completions schema refuses a token-id prompt (400,
# "StringOrArray"): no route carries token ids both ways, so the worker stops instead of waiting.
GATEWAY_WITHOUT_SGLANG = (
    "{url} is an SGLang model gateway whose workers answer no SGLang info route: smg fronts vLLM "
    "only as a text server (over HTTP it refuses token-id prompts and has no token route; over "
    "gRPC it tokenizes itself), so give the workers the vLLM servers' own URLs (docs/DEPLOY.md)")


CAPTURE_ARGS = ("enable_return_aux_hidden_states", "return_aux_hidden_state_layer_ids", "disable_radix_cache",
                "chunked_prefill_size")
"""SGLang's resolved server arguments that say whether, and how, it returns aux hidden states
(docs/journal/sglang-aux-hidden-states.md); absent keys read as ``""``."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself, stamped on every record it generates."""

    model_path: str
    engine_version: str
    engine: str = "sglang"  # one of eaglefeed.core.config.ENGINE_NAMES
    served_model: str = ""  # the name vLLM's /v1/completions wants as ``model``
    gateway: bool = False  # an SGLang model gateway: its own /health says nothing of its workers
    preferred_sampling_params: Any = None  # SGLang /model_info: merged under every request
    deterministic: bool | None = None  # SGLang --enable-deterministic-inference (None: not reported)
    weight_version: str | None = None  # SGLang /model_info weight_version (None: not reported)
    # SGLang /server_info's hidden-state settings (CAPTURE_ARGS), read by generate --hidden-states
    capture_args: Mapping[str, Any] = field(default_factory=dict)
    # prompt + max_new_tokens the server takes (SGLang /server_info, vLLM max_model_len; None: unknown)
    context_length: int | None = None

    @property
    def seeded(self) -> bool | None:
        """Whether ``sampling_seed`` decides the draws: vLLM always; SGLang only when deterministic.

        SGLang 0.5.23 passes the seed to its sampler only under ``--enable-deterministic-inference``
        (``srt/sampling/sampling_batch_info.py``: ``sampling_seed`` is None otherwise).
        """
        return True if self.engine == "vllm" else self.deterministic


async def read_server_info(client: httpx.AsyncClient, url: str, engine: str) -> ServerInfo:
    """Read the engine, version and model of the server at ``url``.

    Args:
        client: the HTTP client.
        url: the server's base URL.
        engine: ``sglang`` or ``vllm`` to read that engine's routes only; ``auto`` to detect.

    Raises:
        ConfigError: a wrong key (401/403), or ``auto`` found neither engine (404 on both).
        RetryableInferenceError: the server is unreachable or not ready.
    """
    if engine in ("auto", "sglang"):
        model = await _get_either(client, url, "model_info")
        if model.status_code == 404 and await _is_gateway(client, url):
            raise ConfigError(GATEWAY_WITHOUT_SGLANG.format(url=url))  # else --engine sglang would wait
        if model.status_code == 200 or engine == "sglang":
            _check(model)
            server = _check(await _get_either(client, url, "server_info"))
            gateway = model.request.url.path.endswith("/get_model_info") and await _is_gateway(client, url)
            deterministic = _field(server, "enable_deterministic_inference")
            capture_args = {key: _field(server, key) for key in CAPTURE_ARGS}
            version = _field(model, "weight_version")
            return ServerInfo(model_path=str(_field(model, "model_path")),
                              engine_version=str(_field(server, "version")), engine="sglang",
                              gateway=gateway,
                              preferred_sampling_params=_field(model, "preferred_sampling_params"),
                              deterministic=deterministic if isinstance(deterministic, bool) else None,
                              weight_version=str(version) if version not in ("", None) else None,
                              capture_args=capture_args, context_length=sglang_context(server))
        if model.status_code != 404:
            _check(model)
    version = await _get(client, f"{url}/version")
    models = await _get(client, f"{url}/v1/models")
    if version.status_code == 404 and await _is_gateway(client, url):
        raise ConfigError(GATEWAY_WITHOUT_SGLANG.format(url=url))
    if engine == "auto" and version.status_code == 404:
        raise ConfigError(f"{url} answers neither SGLang's /model_info (nor /get_model_info) nor "
                          "vLLM's /version: check --sglang-url (or name the engine with --engine)")
    _check(version)
    _check(models)
    data = _field(models, "data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise RetryableInferenceError("bad_response", f"{url}/v1/models lists no model")
    card = data[0]
    return ServerInfo(model_path=str(card.get("root") or card.get("id", "")),
                      engine_version=str(_field(version, "version")), engine="vllm",
                      served_model=str(card.get("id", "")),
                      context_length=_positive(card.get("max_model_len")))


def sglang_context(server: httpx.Response) -> int | None:
    """The context SGLang 0.5.23 checks prompt + max_new_tokens against, from ``/server_info``.

    Its tokenizer manager refuses ``input + max_new_tokens > context_len`` (and an input of
    ``context_len`` or more). ``/server_info`` reports ``context_length`` (the server argument:
    None unless given) and the scheduler's ``max_req_input_len`` (``min(context_len - 1, KV pool - 1)
    - 5``, ``srt/managers/tp_worker.py``), so without the first the context is read as the second + 6.
    """
    given = _positive(_field(server, "context_length"))
    longest_input = _positive(_field(server, "max_req_input_len"))
    return given if given is not None else (None if longest_input is None else longest_input + 6)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _get_either(client: httpx.AsyncClient, url: str, route: str) -> httpx.Response:
    """``GET /<route>``, or ``GET /get_<route>`` when that is a 404 (the gateway, older SGLang)."""
    resp = await _get(client, f"{url}/{route}")
    if resp.status_code != 404:
        return resp
    return await _get(client, f"{url}/get_{route}")


async def _is_gateway(client: httpx.AsyncClient, url: str) -> bool:
    """Whether ``url`` is an SGLang model gateway: its ``/readiness`` answers with a JSON ``status``."""
    resp = await _get(client, f"{url}/readiness")
    try:
        body = resp.json()
    except ValueError:
        return False
    return resp.status_code in (200, 503) and isinstance(body, dict) and "status" in body


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    try:
        return await client.get(url)
    except httpx.TransportError as exc:
        raise RetryableInferenceError("connect", f"{url}: {exc!r}") from exc


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code in (401, 403):  # a wrong key stops the worker, never dead-letters the backlog
        raise ConfigError(f"{resp.request.url} answered HTTP {resp.status_code}; check --api-key")
    if resp.status_code != 200:
        raise RetryableInferenceError(f"http_{resp.status_code}", f"{resp.request.url}: {resp.text[:200]}")
    return resp


def _field(resp: httpx.Response, key: str) -> Any:
    try:
        body = resp.json()
    except ValueError as exc:
        raise RetryableInferenceError("bad_response", f"{resp.request.url}: body is not JSON") from exc
    if not isinstance(body, dict):
        raise RetryableInferenceError("bad_response", f"{resp.request.url}: body is not an object")
    return body.get(key, "")
