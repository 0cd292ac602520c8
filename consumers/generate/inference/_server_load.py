"""Read what an inference server reports of its load: running and waiting requests, from ``/metrics``.

SGLang (with ``--enable-metrics``) exports ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs``,
vLLM ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``; each is one series per
data-parallel rank (or engine), so the series are summed. The names are found with one regular
expression over the text rather than a full Prometheus parse: vLLM's page carries hundreds of
histogram lines, and the worker reads it every poll on its event loop.
"""

from __future__ import annotations

import re

import httpx

from eaglefeed.consumers.generate.inference.limits import Load

RUNNING = ("sglang:num_running_reqs", "vllm:num_requests_running")
WAITING = ("sglang:num_queue_reqs", "vllm:num_requests_waiting")

_SERIES = re.compile(r"^(" + "|".join(re.escape(n) for n in RUNNING + WAITING) + r")(?:\{[^}]*\})?"
                     r"[ \t]+([-+0-9.eE]+|NaN)(?:[ \t]+\S+)?[ \t]*$", re.M)


def parse_load(text: str) -> Load | None:
    """The load a ``/metrics`` page reports, summed over its series; None when it names neither count."""
    running = waiting = 0.0
    seen_running = seen_waiting = False
    for match in _SERIES.finditer(text):
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        if value != value:  # NaN: a rank that has not reported yet
            continue
        if match.group(1) in RUNNING:
            running += value
            seen_running = True
        else:
            waiting += value
            seen_waiting = True
    if not (seen_running and seen_waiting):
        return None
    return Load(running=max(running, 0.0), waiting=max(waiting, 0.0))


async def read_load(client: httpx.AsyncClient, url: str, *, timeout: float) -> Load | None:
    """``GET url/metrics`` and parse it; None when the server does not report its load there.

    Raises:
        httpx.HTTPError: the server did not answer (the caller keeps the last reading's decision).
    """
    resp = await client.get(f"{url}/metrics", timeout=timeout)
    if resp.status_code != 200:
        return None  # SGLang without --enable-metrics answers 404
    return parse_load(resp.text)


__all__ = ["RUNNING", "WAITING", "parse_load", "read_load"]
