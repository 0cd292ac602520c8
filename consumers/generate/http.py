"""The worker's HTTP client: the httpx API over aiohttp's transport.

httpx's own transport (httpcore) costs milliseconds of CPU per request at high concurrency: its
pool walks every connection on each request, and its pure-Python HTTP parser is slow. The
``httpx-aiohttp`` transport keeps httpx's client, errors and MockTransport seam for tests, and
sends through aiohttp's C-accelerated client instead (see ``bench/worker_cpu.py``).
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport


def make_http_client(*, connections: int, timeout: httpx.Timeout,
                     headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with up to ``connections`` keep-alive connections over aiohttp."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(transport=AiohttpTransport(limits=limits), timeout=timeout, headers=headers)
