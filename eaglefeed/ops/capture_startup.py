"""Start-up of ``eaglefeed capture``: the HTTP client and pool, the rows' format, the servers' checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from eaglefeed.consumers.generate.inference import ServerPool, make_http_client, probe_capture, reach_servers
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.ops.capture_options import CaptureOptions
from eaglefeed.ops.capture_row import NATIVE


def open_clients(options: CaptureOptions,
                 transport: httpx.AsyncBaseTransport | None) -> tuple[httpx.AsyncClient, ServerPool]:
    """The HTTP client (over ``transport`` when given: tests) and the pool of ``options.urls``."""
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else None
    timeout = httpx.Timeout(options.request_timeout, connect=min(10.0, options.request_timeout))
    http = (httpx.AsyncClient(transport=transport, timeout=timeout, headers=headers)
            if transport is not None else
            make_http_client(connections=options.concurrency + 8 + len(options.urls), timeout=timeout,
                             headers=headers))
    pool = ServerPool(client=http, urls=options.urls, eject_after=options.eject_after,
                      probe_interval=options.probe_interval, engine="auto")
    return http, pool


def like_the_rows(settings: CaptureSettings, formats: set[tuple[tuple[int, ...], str]],
                  root: Path) -> CaptureSettings:
    """The settings, held to the layers and dtype of the rows that already have states (if all agree).

    Raises:
        ConfigError: the run asks for other layers or another dtype than those rows hold.
    """
    if len(formats) != 1:
        return settings
    [(layers, dtype)] = formats
    if settings.layers is not None and tuple(sorted(settings.layers)) != layers:
        raise ConfigError(f"capture: the rows of {root} that have states hold layers {list(layers)}; "
                          f"--hidden-states asks for {sorted(settings.layers)}: every row must hold the same")
    if settings.dtype is not None and settings.dtype != dtype:
        raise ConfigError(f"capture: the rows of {root} that have states hold {dtype}; "
                          f"--hidden-states-dtype asks for {settings.dtype}: every row must hold the same")
    return replace(settings, layers=layers, with_last=False, dtype=dtype)


async def check_servers(pool: ServerPool, http: httpx.AsyncClient, settings: CaptureSettings, *,
                        timeout: float, stop: StopSignal) -> tuple[int, ...]:
    """Reach every server, probe that it captures as ``settings`` asks; the layers it captures.

    Raises:
        ConfigError: a server is unreachable, not vLLM, does not capture (or not as asked), or
            has no native token route.
    """
    await reach_servers(pool, timeout=timeout, stop=stop)
    for server in pool.servers:
        engine = (await pool.info(server)).engine
        if engine != "vllm":
            raise ConfigError(f"capture: {server.url} is {engine}; eaglefeed capture needs vLLM with "
                              "eaglefeed's connector (docs/DEPLOY.md, \"Capturing hidden states\")")
    probed: Any = await probe_capture(pool, http, settings)
    # the layers (older probe_capture), or (layers, N)
    layers = tuple(probed[0] if probed and isinstance(probed[0], tuple) else probed)
    for server in pool.servers:
        if not server.native_route:
            raise ConfigError(f"capture: {server.url} has no {NATIVE}: start vLLM with "
                              "--enable-scale-out (docs/DEPLOY.md, \"Capturing hidden states\")")
    return layers
