"""Reach the inference servers at start-up: each answers within the connect timeout, or the worker stops.

A server has answered once any HTTP response came back from its info routes (a 503 of a server
still starting counts: it is there). One that gives none within ``timeout`` seconds stops the
worker with :class:`ServerUnreachableError` naming its URL and the cause, the rule
``eaglefeed.core.connect`` applies to the broker. A cause that waiting does not cure (host not
found, a TLS failure: :data:`FOR_GOOD`) stops it after :data:`TRIES_FOR_GOOD` tries in a row
instead, in a few seconds, with what to fix. A refused connection is waited out for the whole
``timeout`` like a timeout: a server loading its model, or restarting, refuses connections until
it listens (a worker started beside its server, or during a server's restart, must not stop).
A stop asked for meanwhile (Ctrl-C) ends the wait at once with :class:`StopRequestedError`.
What a server says about itself is kept (``ServerPool.info``). A server that answered once and
goes away later (refusing connections while it restarts, too) is the pool's business: out of
rotation, probed, waited for.
"""

from __future__ import annotations

import asyncio
import logging
import time

from eaglefeed.consumers.generate.inference.servers import Server, ServerPool, cause_of
from eaglefeed.core.errors import RetryableInferenceError, ServerUnreachableError, StopRequestedError
from eaglefeed.core.lifecycle import StopSignal

log = logging.getLogger(__name__)

ATTEMPT_PAUSE = 0.5
"""Seconds between two attempts on a server that gave no response."""
STOP_CHECK = 0.1
"""Seconds between two looks at the stop signal while waiting."""
REPORT_EVERY = 15.0
"""Seconds between "still waiting for the server" lines."""
TRIES_FOR_GOOD = 3
"""Tries in a row that fail for a cause of :data:`FOR_GOOD` before the worker stops."""
PAUSE_FOR_GOOD = 1.0
"""Seconds between two such tries (a port taken over by a server a moment late still gets its chance)."""
FOR_GOOD = {
    "DNS: host not found": "check the host name of --sglang-url",
    "TLS": "check http:// or https:// in --sglang-url (https:// to a plain-http server fails so) and the "
           "server's certificate",
}
"""Causes (``servers.cause_of``) that waiting does not cure, each with what to fix."""


async def reach_servers(pool: ServerPool, *, timeout: float, stop: StopSignal) -> None:
    """Wait until every server of ``pool`` has answered once.

    Args:
        pool: the servers; what each says about itself is kept in it.
        timeout: seconds a server may take to give its first response.
        stop: a stop asked for meanwhile ends the wait.

    Raises:
        ServerUnreachableError: a server gave no response within ``timeout``.
        ConfigError: a server refused the key, or is neither SGLang nor vLLM.
        StopRequestedError: ``stop`` was set while a server had not answered yet.
    """
    started = time.monotonic()
    tasks = {asyncio.ensure_future(_reach(pool, server, timeout=timeout)): server for server in pool.servers}
    reported = started
    try:
        while True:
            pending = [task for task in tasks if not task.done()]
            for task in tasks:
                if task.done():
                    task.result()  # a server that cannot be reached (or refused us) stops the worker
            if not pending:
                return
            if stop.is_set():
                waiting = ", ".join(tasks[task].url for task in pending)
                raise StopRequestedError(f"stopped while connecting to {waiting}")
            now = time.monotonic()
            if now - reported >= REPORT_EVERY:
                for task in pending:
                    server = tasks[task]
                    log.warning("still waiting for %s to answer (%.0f of %.0f s; last error: %s)",
                                server.url, now - started, timeout, server.last_error or "none yet")
                reported = now
            await asyncio.wait(pending, timeout=STOP_CHECK, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _reach(pool: ServerPool, server: Server, *, timeout: float) -> None:
    """Read ``server``'s info until it gives any response, for up to ``timeout`` seconds.

    :data:`TRIES_FOR_GOOD` failures in a row of a cause waiting does not cure end the wait sooner.
    """
    started = time.monotonic()
    deadline = started + timeout
    for_good = 0  # tries in a row that failed for a cause of FOR_GOOD
    while True:
        cause = None
        try:
            await asyncio.wait_for(pool.info(server), timeout=max(0.1, deadline - time.monotonic()))
            return
        except RetryableInferenceError as exc:
            if exc.kind != "connect":
                return  # it answered (e.g. 503 while it starts): the pool takes it from here
            if isinstance(exc.__cause__, Exception):
                cause = cause_of(exc.__cause__)
        except asyncio.TimeoutError:
            server.last_error = server.last_error or f"no response within {timeout:g} s"
        for_good = for_good + 1 if cause in FOR_GOOD else 0
        if cause is not None and for_good >= TRIES_FOR_GOOD:
            took = time.monotonic() - started
            raise ServerUnreachableError(
                f"cannot reach the inference server at {server.url}: {server.last_error} ({for_good} tries "
                f"in {took:.0f} s; waiting longer does not cure this): {FOR_GOOD[cause]}")
        if time.monotonic() >= deadline:
            raise ServerUnreachableError(
                f"cannot reach the inference server at {server.url} (tried for {timeout:.0f} s; last error: "
                f"{server.last_error or 'none'}): check --sglang-url, or wait longer with --connect-timeout")
        await asyncio.sleep(PAUSE_FOR_GOOD if for_good else ATTEMPT_PAUSE)
