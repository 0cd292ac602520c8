"""The pool of inference servers: least-outstanding-requests choice, ejection and health probing.

A server that fails ``eject_after`` requests in a row (connection errors, timeouts, 5xx) is
taken out of rotation and probed on ``GET /health`` every ``probe_interval`` seconds until it
answers 200 again. While no server is in rotation, requests wait for one instead of burning
their attempts: a server outage delays work, it does not dead-letter the backlog. The ejection
line names the cause (connection refused, DNS, timeout, TLS, HTTP status), and while no server
is in rotation a "no server available for N s" line repeats every ``report_interval`` seconds.

An SGLang model gateway answers ``/health`` with 200 whatever its workers do, so a gateway
(``ServerInfo.gateway``) is probed by what reaches a worker instead: its ``/readiness`` (200 while
it counts a healthy worker) and then a one-token ``POST /generate`` through it, as SGLang's own
``/health`` generates one token.

A request of a regenerated conversation goes to its conversation's server while that server is in
rotation and not overloaded (``affinity``: its prefix cache holds the earlier turns).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from eaglefeed.consumers.generate.inference.affinity import choose, home_server
from eaglefeed.consumers.generate.inference.detect import ServerInfo, read_server_info
from eaglefeed.consumers.generate.inference.limits import tolerated
from eaglefeed.consumers.generate.inference.neutral import override_problem
from eaglefeed.core.errors import ConfigError, RetryableInferenceError

log = logging.getLogger(__name__)


class Server:
    """One inference server: its URL, outstanding requests and health.

    Args:
        url: its base URL (a trailing slash is dropped).
    """

    def __init__(self, *, url: str) -> None:
        self.url = url.rstrip("/")
        self.outstanding = 0
        self.sequences = 0  # requests x n outstanding
        self.rows_done = 0  # samples it generated (for the worker's status record)
        self.limit: int | None = None  # --concurrency auto: sequences it may have (None: no own limit)
        self.healthy = True
        self.failures = 0  # consecutive
        self.last_error: str | None = None  # why its last request (or health probe) failed
        self.info: ServerInfo | None = None
        self.info_lock = asyncio.Lock()  # one info read per server, not one per waiting request
        self.native_route = True  # vLLM: False once the token route answered 403/404
        self.gateway = False  # an SGLang model gateway (probed through to a worker, not on /health)
        self.refused: str | None = None  # why it is out of rotation for good (another tokenizer)


class ServerPool:
    """Pick servers (a conversation's own, else fewest outstanding); eject failing ones, probe them back in.

    Args:
        client: what reads the servers' info routes and probes their ``/health`` (the engines send
            the generation requests themselves: ``eaglefeed.consumers.generate.inference.engines``).
        urls: base URLs (SGLang or vLLM servers, or routers).
        eject_after: consecutive failures that take a server out of rotation.
        probe_interval: seconds between health probes of an ejected server.
        on_change: called with the server after its outstanding count or health changed.
        report_interval: seconds between "no server available" lines while none is in rotation.
        engine: ``sglang``, ``vllm``, or ``auto`` (each server's own, from its info routes).
        affinity_load: a conversation's requests go to its own server unless that server has more
            than this × the mean outstanding requests (``eaglefeed.consumers.generate.inference.affinity``);
            0: every request goes to the least-outstanding server.
        on_route: called with the route of every request (``home``, ``overloaded``, ``least``).
    """

    def __init__(self, *, client: httpx.AsyncClient, urls: Sequence[str], eject_after: int,
                 probe_interval: float, on_change: Callable[[Server], None] | None = None,
                 report_interval: float = 30.0, engine: str = "auto", affinity_load: float = 0.0,
                 on_route: Callable[[str], None] | None = None) -> None:
        if not urls:
            raise ValueError("at least one server URL is needed")
        self._client = client
        self.servers = [Server(url=u) for u in urls]
        self.eject_after = eject_after
        self.probe_interval = probe_interval
        self._on_change = on_change or (lambda _s: None)
        self.engine = engine
        self._available = asyncio.Event()
        self._available.set()
        self._probes: set[asyncio.Task[None]] = set()
        self.report_interval = report_interval
        self.affinity_load = affinity_load
        self._on_route = on_route or (lambda _r: None)

    async def acquire(self, affinity: str | None = None, *, weight: int = 1) -> Server:
        """Wait for a healthy server, pick one and count a request on it.

        Args:
            affinity: the conversation the request belongs to (``affinity.affinity_key``): its own
                server unless overloaded; None: the least loaded server.
            weight: the request's sequences (its ``n``). A server with a ``limit`` is chosen only
                while they fit under it (a conversation's own server: up to the queue its limit
                tolerates). When none has room the request waits for one to end or a limit to
                rise; only when every server is idle (a request of more sequences than any limit)
                does it go where most room is left.
        """
        while True:
            healthy = [s for s in self.servers if s.healthy]
            if healthy:
                room = [s for s in healthy if s.limit is None or s.sequences + weight <= s.limit]
                if affinity is not None and self.affinity_load > 0 and len(healthy) > 1:
                    home = home_server(affinity, healthy)
                    if (home not in room and home.limit is not None
                            and home.sequences + weight <= tolerated(home.limit)):
                        room.append(home)  # its cache holds the earlier turns: a short queue there is cheaper
                if not room and any(s.sequences > 0 for s in healthy):
                    # Every server is at its limit: wait for a request to end or a limit to rise.
                    # Requests that waited while a server was out of rotation, or slots sized to a
                    # limit since cut, would otherwise all land on it at once, above its limit.
                    self._available.clear()
                    await self._available.wait()
                    continue
                if not room:  # all idle, and the request is larger than any limit: most room
                    room = [max(healthy, key=lambda s: (s.limit or 0) - s.sequences)]
                server, route = choose(room, key=affinity, load_factor=self.affinity_load)
                self._on_route(route)
                server.outstanding += 1
                server.sequences += weight
                self._on_change(server)
                return server
            self._available.clear()
            await self._available.wait()

    def limits_changed(self) -> None:
        """Wake the requests waiting for room: a server's ``limit`` was raised (or reset)."""
        self._available.set()

    def release(self, server: Server, *, failed: bool, weight: int = 1) -> None:
        """End a request of ``weight`` sequences on ``server``; ``failed``: a server-side one, not a 4xx."""
        server.outstanding -= 1
        server.sequences -= weight
        self._available.set()  # a request waiting for room may fit now
        if not failed:
            server.failures = 0
        else:
            server.failures += 1
            if server.healthy and server.failures >= self.eject_after:
                log.warning("server %s failed %d requests in a row (last error: %s): out of rotation, "
                            "probing %s every %g s", server.url, server.failures,
                            server.last_error or "unknown", "its workers" if server.gateway else "/health",
                            self.probe_interval)
                server.healthy = False
                self.spawn(self._probe(server))
                if not any(s.healthy for s in self.servers):
                    self.spawn(self._report_outage())
        self._on_change(server)

    def refuse(self, server: Server, *, reason: str) -> None:
        """Take ``server`` out of rotation for good (it serves another tokenizer): never probed back in."""
        server.refused = reason
        server.last_error = reason
        server.healthy = False
        self._on_change(server)

    @property
    def in_rotation(self) -> bool:
        """Whether any server is in rotation (a request can be sent now)."""
        return any(s.healthy for s in self.servers)

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as a background task of the pool (probes, load readings): :meth:`close` stops it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _report_outage(self) -> None:
        """While no server is in rotation, say so every ``report_interval`` seconds."""
        since = time.monotonic()
        while True:
            await asyncio.sleep(self.report_interval)
            if any(s.healthy for s in self.servers):
                return
            errors = "; ".join(f"{s.url}: {s.last_error or 'unknown'}" for s in self.servers)
            log.warning("no server available for %.0f s (last error: %s); requests wait",
                        time.monotonic() - since, errors)

    async def info(self, server: Server) -> ServerInfo:
        """The model path and engine version of ``server`` (read once, from its info routes)."""
        if server.info is None:
            async with server.info_lock:
                if server.info is None:
                    server.info = await self._read_info(server)
        return server.info

    def note_weight_versions(self, server: Server, info: ServerInfo, versions: Sequence[str | None]) -> None:
        """Forget ``server``'s info when a response names other weights than it said it serves.

        SGLang can swap weights in place (``/update_weights_from_disk`` and kin) and then reports
        another ``weight_version`` (and possibly ``model_path``) from ``/model_info``: the next
        request reads the info again, so rows never carry the identity of weights gone.
        """
        seen = {v for v in versions if v}
        if info.weight_version is None or not seen or seen == {info.weight_version}:
            return
        if server.info is info:
            log.info("server %s now answers with weight version %s (was %s): reading its info again",
                     server.url, ", ".join(sorted(seen)), info.weight_version)
            server.info = None

    async def _read_info(self, server: Server) -> ServerInfo:
        try:
            info = await read_server_info(self._client, server.url, self.engine)
        except RetryableInferenceError as exc:
            cause = exc.__cause__
            server.last_error = describe(cause) if isinstance(cause, Exception) else str(exc)
            raise
        problem = override_problem(info.preferred_sampling_params)
        if problem is not None:  # every row would carry sampling the server changed: stop, in one line
            raise ConfigError(f"server {server.url}: {problem}; restart it without them (or with only "
                              "keys eaglefeed sends), see docs/DEPLOY.md")
        server.gateway = info.gateway
        log.info("server %s: engine %s %s, model %s%s", server.url, info.engine, info.engine_version,
                 info.model_path, " (through an SGLang model gateway)" if info.gateway else "")
        return info

    async def close(self) -> None:
        """Stop the health probes and the other background tasks (:meth:`spawn`)."""
        for task in list(self._probes):
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)

    async def _probe(self, server: Server) -> None:
        while not server.healthy and server.refused is None:
            await asyncio.sleep(self.probe_interval)
            if server.refused is not None:
                return
            try:
                check = self._gateway_problem if server.gateway else self._health_problem
                problem = await check(server)
            except httpx.HTTPError as exc:
                server.last_error = describe(exc)
                continue
            if problem is not None:
                server.last_error = problem
            else:
                log.info("server %s is healthy again: back in rotation", server.url)
                server.info = None  # it may have restarted with another model, version or engine
                server.native_route = True
                server.healthy = True
                server.failures = 0
                self._available.set()
                self._on_change(server)

    async def _health_problem(self, server: Server) -> str | None:
        """Why ``GET /health`` says ``server`` is unhealthy (None: it is healthy)."""
        resp = await self._client.get(f"{server.url}/health", timeout=self._probe_timeout)
        return None if resp.status_code == 200 else f"/health answered HTTP {resp.status_code}"

    async def _gateway_problem(self, server: Server) -> str | None:
        """Why a gateway cannot serve a request: no healthy worker, or a one-token generation failed."""
        ready = await self._client.get(f"{server.url}/readiness", timeout=self._probe_timeout)
        if ready.status_code != 200:
            return f"the gateway's /readiness answered HTTP {ready.status_code}: {ready.text[:200]}"
        resp = await self._client.post(f"{server.url}/generate", timeout=self._probe_timeout,
                                       json={"input_ids": [0], "stream": False,
                                             "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
        if resp.status_code != 200:
            return (f"a one-token /generate through the gateway answered HTTP {resp.status_code}: "
                    f"{resp.text[:200]}")
        return None

    @property
    def _probe_timeout(self) -> float:
        return max(self.probe_interval, 5.0)


def describe(exc: Exception) -> str:
    """Say why a request got no response: connection refused, DNS, timeout, TLS, or the error itself.

    The message decides before the class: the aiohttp transport reports a refused connection or
    an unknown host as ``httpx.ConnectTimeout``.
    """
    text = _text(exc)
    cause = cause_of(exc)
    if isinstance(exc, httpx.TransportError):  # the transport's class (ConnectTimeout) is not what happened
        return cause if text == type(exc).__name__ else f"{cause} ({text})"[:300]
    return f"{cause} ({type(exc).__name__}: {text})"[:300]


def cause_of(exc: Exception) -> str:
    """The cause :func:`describe` names: one of :data:`CAUSES`, or the exception's class name."""
    low = _text(exc).lower()
    if "refused" in low or "connect call failed" in low:
        return "connection refused"
    if "all connection attempts failed" in low:
        return "cannot connect (refused or unreachable)"
    if any(words in low for words in ("name or service not known", "nodename nor servname", "getaddrinfo",
                                      "name resolution", "no address associated")):
        return "DNS: host not found"
    if "ssl" in low or "certificate" in low or "tls" in low:
        return "TLS"
    if any(words in low for words in ("disconnected", "without sending a response", "connection reset",
                                      "reset by peer", "broken pipe", "connection closed")) or isinstance(
            exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return "the server closed the connection"
    if isinstance(exc, httpx.ConnectTimeout):
        return "timed out connecting"
    if isinstance(exc, httpx.ReadTimeout):
        return "timed out waiting for the response"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return type(exc).__name__


CAUSES = ("connection refused", "cannot connect (refused or unreachable)", "DNS: host not found", "TLS",
          "the server closed the connection", "timed out connecting", "timed out waiting for the response",
          "timeout")
"""The causes :func:`cause_of` tells apart."""


def _text(exc: Exception) -> str:
    # aiohttp names the (default) TLS context in every error: on a plain http:// URL it only misleads
    return (str(exc) or type(exc).__name__).replace(" ssl:default", "")


__all__ = ["Server", "ServerInfo", "ServerPool"]
