"""What a scripted vLLM answers on its info routes, for tests that fake one with ``httpx.MockTransport``."""

from __future__ import annotations

import httpx

INFO_ROUTES = {
    "/version": {"version": "0.32.0"},
    "/v1/models": {"data": [{"id": "tiny", "root": "demo/model", "owned_by": "vllm"}]},
}
"""vLLM's ``GET /version`` and ``GET /v1/models`` (SGLang's info routes are 404 on vLLM)."""


def vllm_info(path: str) -> httpx.Response | None:
    """The answer to an info route of vLLM (404 to SGLang's), or None for any other path."""
    if path in INFO_ROUTES:
        return httpx.Response(200, json=INFO_ROUTES[path])
    if path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
        return httpx.Response(404)
    return None
