"""The aiohttp application: SGLang's native routes, API-key check and lifecycle."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from eaglefeed.devtools.standin.config import STANDIN_VERSION, StandinConfig
from eaglefeed.devtools.standin.engine import Engine
from eaglefeed.devtools.standin.generate import ENGINE_KEY, handle_generate
from eaglefeed.devtools.standin.hidden_states import server_info_keys
from eaglefeed.devtools.standin.parsing import max_req_input_len
from eaglefeed.devtools.standin.responses import error_response, json_response
from eaglefeed.devtools.standin.tokenize import handle_tokenize
from eaglefeed.devtools.standin.vocab import Vocab, load_vocab

log = logging.getLogger(__name__)
STATE_KEY = web.AppKey("state", dict)
MAX_BODY_BYTES = 256 * 1024 * 1024
_FLUSH_NOTE = (
    "Please check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(config: StandinConfig, *, vocab: Vocab | None = None) -> web.Application:
    """Build the stand-in's web application.

    Args:
        config: the server configuration (``config.tokenizer`` must name a tokenizer directory
            unless ``vocab`` is given).
        vocab: an already loaded tokenizer (tests share one between servers).

    Raises:
        ValueError: when no tokenizer is configured.
    """
    if vocab is None:
        if config.tokenizer is None:
            raise ValueError("the stand-in needs a tokenizer directory (--tokenizer)")
        vocab = load_vocab(config.tokenizer, trust_remote_code=config.trust_remote_code)
    middlewares = [_api_key_middleware(config.api_key)] if config.api_key else []
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    app[ENGINE_KEY] = Engine(config=config, vocab=vocab)
    app[STATE_KEY] = {"status": "starting"}
    app.router.add_route("POST", "/generate", handle_generate)
    app.router.add_route("PUT", "/generate", handle_generate)
    app.router.add_post("/tokenize", handle_tokenize)
    app.router.add_post("/v1/tokenize", handle_tokenize)
    app.router.add_get("/health", _health_generate)
    app.router.add_get("/health_generate", _health_generate)
    app.router.add_get("/model_info", _model_info)
    app.router.add_get("/server_info", _server_info)
    app.router.add_get("/get_model_info", _deprecated(_model_info, "/model_info"))  # as SGLang 0.5.23
    app.router.add_get("/get_server_info", _deprecated(_server_info, "/server_info"))
    app.router.add_get("/v1/models", _models)
    app.router.add_route("*", "/flush_cache", _flush_cache)
    app.router.add_post("/abort_request", _abort_request)
    app.router.add_get("/metrics", _metrics)
    app.on_startup.append(_on_startup)
    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_on_cleanup)
    return app


def _api_key_middleware(api_key: str) -> Any:
    """Require ``Authorization: Bearer <key>`` except on /health* and /metrics (as SGLang)."""
    expected = f"Bearer {api_key}"

    @web.middleware
    async def check_api_key(request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/metrics")):
            return await handler(request)
        if request.headers.get("Authorization") != expected:
            return json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check_api_key


async def _on_startup(app: web.Application) -> None:
    app[ENGINE_KEY].start()
    delay = app[ENGINE_KEY].config.startup_seconds
    if delay <= 0:
        app[STATE_KEY]["status"] = "ready"
        return

    async def become_ready() -> None:
        await asyncio.sleep(delay)
        if app[STATE_KEY]["status"] == "starting":
            app[STATE_KEY]["status"] = "ready"

    app[STATE_KEY]["ready_task"] = asyncio.get_running_loop().create_task(become_ready())


async def _on_shutdown(app: web.Application) -> None:
    app[STATE_KEY]["status"] = "shutting_down"
    app[ENGINE_KEY].begin_shutdown()


async def _on_cleanup(app: web.Application) -> None:
    task = app[STATE_KEY].get("ready_task")
    if task is not None:
        task.cancel()
    await app[ENGINE_KEY].stop()


async def _health_generate(request: web.Request) -> web.Response:
    """``/health`` and ``/health_generate``: one handler in SGLang 0.5.23, a real one-token generation.

    SGLang answers 200 once the generation produced output within ``SGLANG_HEALTH_CHECK_TIMEOUT``
    (20 s), else 503 (``srt/entrypoints/http_server.py`` ``health_generate``; ``/health`` skips
    the generation only with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false``).
    """
    if request.app[STATE_KEY]["status"] != "ready":
        return web.Response(status=503)
    engine = request.app[ENGINE_KEY]
    try:
        await asyncio.wait_for(engine.health_generate(), engine.config.health_check_timeout)
    except asyncio.TimeoutError:
        log.error("Health check failed. Server couldn't get a response from detokenizer for last %g seconds.",
                  engine.config.health_check_timeout)
        return web.Response(status=503)
    return web.Response(status=200)


def _deprecated(handler: _Handler, route: str) -> _Handler:
    """SGLang 0.5.23's ``/get_*`` names: the same answer as ``route``, and a deprecation line in the log."""

    async def old_name(request: web.Request) -> web.StreamResponse:
        log.warning("Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' "
                    "instead.", request.path, route)
        return await handler(request)

    return old_name


async def _model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    config = engine.config
    return json_response(
        {
            "model_path": config.model_path,
            "served_model_name": config.model_name,
            "tokenizer_path": str(engine.vocab.path),
            "is_generation": True,
            "preferred_sampling_params": config.preferred_sampling_params,
            "weight_version": config.weight_version,
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "eaglefeed_standin",
            "architectures": ["EaglefeedStandinForCausalLM"],
        }
    )


async def _server_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    config = engine.config
    knobs = dataclasses.asdict(config)
    knobs["tokenizer"] = str(engine.vocab.path)
    knobs["api_key"] = "<redacted>" if config.api_key else None
    info = {
        "model_path": config.model_path,
        "tokenizer_path": str(engine.vocab.path),
        "served_model_name": config.model_name,
        "host": config.host,
        "port": config.port,
        "context_length": config.context_length,
        "max_running_requests": config.max_running_requests,
        "max_queued_requests": config.max_queued_requests,
        "max_total_num_tokens": config.total_num_tokens,
        "max_req_input_len": max_req_input_len(config.context_length),
        "page_size": max(config.prefix_cache_block_size, 1),
        "disable_radix_cache": config.prefix_cache_block_size == 0,
        "random_seed": config.random_seed,
        # SGLang reports its flag here; the stand-in's own "always" mode is not SGLang's, so false
        "enable_deterministic_inference": config.seed_mode == "deterministic",
        "weight_version": config.weight_version,
        "incremental_streaming_output": config.incremental_streaming_output,
        "enable_metrics": True,
        "skip_tokenizer_init": False,
        "api_key": knobs["api_key"],
        **server_info_keys(config),
        "startup_time": {"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0,
                         "cuda_graph": {}},
        "internal_states": [engine.server_state()],
        "version": STANDIN_VERSION,
        "frontend": "python",
        "eaglefeed_standin": True,
        "eaglefeed_standin_config": knobs,
    }
    return json_response(info)


async def _models(request: web.Request) -> web.Response:
    config = request.app[ENGINE_KEY].config
    card = {
        "id": config.model_name,
        "object": "model",
        "created": int(request.app[ENGINE_KEY].started_at),
        "owned_by": "sglang",
        "root": config.model_path,
        "max_model_len": config.context_length,
    }
    return json_response({"object": "list", "data": [card]})


async def _flush_cache(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if engine.scheduler.num_running or engine.scheduler.num_waiting:
        return web.Response(status=400, text="Cache not flushed. " + _FLUSH_NOTE)
    engine.cache.clear()
    return web.Response(status=200, text="Cache flushed.\n" + _FLUSH_NOTE)


async def _abort_request(request: web.Request) -> web.Response:
    try:
        obj = json.loads(await request.read() or b"{}")
        rid = obj.get("rid") or ""
        abort_all = bool(obj.get("abort_all", False))
        if not isinstance(rid, str):
            raise ValueError(f"rid must be a string, got {rid!r}")
    except (ValueError, AttributeError) as exc:
        return error_response(str(exc))
    request.app[ENGINE_KEY].abort(rid=rid, abort_all=abort_all)
    return web.Response(status=200)


async def _metrics(request: web.Request) -> web.Response:
    registry = request.app[ENGINE_KEY].metrics.registry
    return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
