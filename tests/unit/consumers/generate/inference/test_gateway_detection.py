"""The SGLang model gateway: detected through its ``get_`` routes, and probed through to a worker."""

import asyncio
import json

import httpx
import pytest

from eaglefeed.consumers.generate.inference import ServerPool, read_server_info
from eaglefeed.core.errors import ConfigError

MODEL = {"model_path": "Qwen/Qwen3-8B", "weight_version": "default"}
SERVER = {"version": "0.5.23", "context_length": 8192}


def gateway(state):
    """smg 1.13 as measured: ``get_`` info routes (proxied to a worker), /readiness, /health always 200."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        state.setdefault("seen", []).append(path)
        workers = state.get("workers", 2)
        if path == "/health":
            return httpx.Response(200, text="OK")
        if path == "/readiness":
            if state.get("ready", workers > 0):
                return httpx.Response(200, json={"status": "ready", "healthy_workers": workers,
                                                 "total_workers": 2})
            return httpx.Response(503, json={"status": "not ready", "reason": "insufficient healthy workers"})
        if path in ("/get_model_info", "/get_server_info", "/generate") and not workers:
            return httpx.Response(503, json={"error": {"code": "no_available_workers"}})
        if path == "/get_model_info":
            return httpx.Response(200, json=MODEL)
        if path == "/get_server_info":
            return httpx.Response(200, json=SERVER)
        if path == "/generate":
            state.setdefault("generated", []).append(json.loads(request.content))
            return httpx.Response(200, json={"output_ids": [5], "meta_info": {}})
        return httpx.Response(404, json={"error": {"type": "invalid_request_error", "code": "unknown_url"}})

    return handle


def old_sglang(request: httpx.Request) -> httpx.Response:
    """An SGLang that serves only the ``get_`` names, and no /readiness."""
    routes = {"/get_model_info": MODEL, "/get_server_info": SERVER}
    path = request.url.path
    return httpx.Response(200, json=routes[path]) if path in routes else httpx.Response(404, json={})


def info(handler, engine):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            return await read_server_info(http, "http://gw", engine)

    return asyncio.run(go())


@pytest.mark.parametrize("engine", ["auto", "sglang"])
def test_the_gateway_is_detected_as_sglang_through_its_get_routes(engine):
    found = info(gateway({}), engine)
    assert (found.engine, found.engine_version, found.model_path, found.gateway) == (
        "sglang", "0.5.23", "Qwen/Qwen3-8B", True)


def test_an_sglang_with_only_the_get_routes_is_not_a_gateway():
    found = info(old_sglang, "auto")
    assert (found.engine, found.engine_version, found.gateway) == ("sglang", "0.5.23", False)


def test_a_gateway_whose_workers_are_all_down_stays_out_of_rotation_though_its_health_is_200():
    state: dict = {}

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(gateway(state))) as http:
            pool = ServerPool(client=http, urls=["http://gw"], eject_after=1, probe_interval=0.01)
            server = await pool.acquire()
            await pool.info(server)
            state["workers"] = 0  # every worker behind it dies
            pool.release(server, failed=True)
            await asyncio.sleep(0.2)
            out_while_down = not server.healthy
            reason = server.last_error
            state["workers"], state["ready"] = 1, True
            await asyncio.wait_for(pool.acquire(), timeout=2)
            await pool.close()
            return out_while_down, reason

    out_while_down, reason = asyncio.run(go())
    assert out_while_down and "/readiness answered HTTP 503" in reason
    assert state["seen"].count("/health") == 0
    body = state["generated"][-1]  # back only after a generation reached a worker
    assert body["input_ids"] == [0] and body["sampling_params"]["max_new_tokens"] == 1


def test_a_gateway_that_reports_a_healthy_worker_late_is_judged_by_a_generation():
    state: dict = {"ready": True}  # the gateway's own health checks lag (60 s × 3 by default)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(gateway(state))) as http:
            pool = ServerPool(client=http, urls=["http://gw"], eject_after=1, probe_interval=0.01)
            server = await pool.acquire()
            await pool.info(server)
            state["workers"] = 0
            pool.release(server, failed=True)
            await asyncio.sleep(0.2)
            await pool.close()
            return server.healthy, server.last_error

    healthy, reason = asyncio.run(go())
    assert not healthy and "one-token /generate through the gateway answered HTTP 503" in reason


def gateway_before_vllm(request: httpx.Request) -> httpx.Response:
    """smg 1.13 before a vLLM, as measured: ``get_`` routes proxied (vLLM's 404), no /version."""
    path = request.url.path
    if path == "/readiness":
        return httpx.Response(200, json={"status": "ready", "healthy_workers": 1, "total_workers": 1})
    if path == "/v1/models":
        card = {"id": "tiny-llama", "owned_by": "self_hosted"}  # the gateway's own list
        return httpx.Response(200, json={"object": "list", "data": [card]})
    if path.startswith("/get_"):
        return httpx.Response(404, json={"detail": "Not Found"})  # vLLM's own answer, proxied
    return httpx.Response(404, json={"error": {"type": "invalid_request_error", "code": "unknown_url"}})


@pytest.mark.parametrize("engine", ["auto", "sglang", "vllm"])
def test_a_gateway_before_vllm_stops_the_worker_with_one_line_naming_the_gateway(engine):
    """No route carries token ids through it, so waiting (``--engine sglang|vllm``) would never end."""
    with pytest.raises(ConfigError) as caught:
        info(gateway_before_vllm, engine)
    message = str(caught.value)
    assert "SGLang model gateway" in message and "vLLM servers' own URLs" in message and "\n" not in message
