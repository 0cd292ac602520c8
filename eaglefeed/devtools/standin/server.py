"""Serve the stand-in over TCP: start, wait for SIGINT/SIGTERM, shut down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from eaglefeed.devtools.standin.app import build_app
from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.standin.vocab import Vocab

log = logging.getLogger("eaglefeed.devtools.standin")

SHUTDOWN_TIMEOUT_SECONDS = 5.0
"""How long in-flight requests may run on after a stop signal before they are cancelled."""


@dataclass(frozen=True, kw_only=True)
class RunningServer:
    """A started stand-in.

    Attributes:
        runner: the aiohttp runner.
        host: the interface it listens on.
        port: the bound port (useful when started with port 0).
    """

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:30000``."""
        return f"http://{self.host}:{self.port}"

    async def close(self) -> None:
        """Stop accepting requests, let in-flight ones finish briefly, stop the engine."""
        await self.runner.cleanup()


async def start_server(config: StandinConfig, *, vocab: Vocab | None = None) -> RunningServer:
    """Build the app and listen on ``config.host:config.port`` (port 0 picks a free one).

    Args:
        config: the server configuration.
        vocab: an already loaded tokenizer, to skip loading it again.
    """
    app = build_app(config, vocab=vocab)
    runner = web.AppRunner(
        app, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT_SECONDS
    )
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=4096, reuse_address=True)
    await site.start()
    port = runner.addresses[0][1]
    return RunningServer(runner=runner, host=config.host, port=port)


async def serve(config: StandinConfig, *, vocab: Vocab | None = None) -> None:
    """Run until SIGINT or SIGTERM, then shut down cleanly.

    Args:
        config: the server configuration.
        vocab: an already loaded tokenizer, to skip loading it again.
    """
    server = await start_server(config, vocab=vocab)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.warning(
        "eaglefeed SGLang STAND-IN (test/demo double, not SGLang) on %s (latency model %s)",
        server.url,
        config.latency_model,
    )
    try:
        await stop.wait()
    finally:
        log.warning("stand-in shutting down")
        await server.close()
