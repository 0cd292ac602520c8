"""Measure how many non-streaming /generate requests per second the stand-in serves.

Starts ``python -m eaglefeed.devtools.standin --latency-model none`` on a free port, then drives it from
``--clients`` worker processes, each with ``--concurrency`` requests in flight (prompts of
``--prompt-len`` ids, ``max_new_tokens`` ``--max-new-tokens``, output length mean set to the
same so most responses carry that many ids), for ``--seconds`` after a short warm-up.

    python -m bench.standin_throughput --clients 2 --concurrency 32 --seconds 5

Clients and server share the machine's cores, so a cheaper client leaves more CPU to the server:
``--client raw`` (default) speaks HTTP/1.1 keep-alive over asyncio streams and reads each full
response; ``aiohttp`` and ``httpx`` use those libraries' async clients (httpx costs the most).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import subprocess
import sys
import time
from typing import Any

import httpx

from eaglefeed.devtools.startup import free_port, wait_healthy


def main() -> int:
    args = _parse_args()
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eaglefeed.devtools.standin",
            "--port",
            str(port),
            "--latency-model",
            "none",
            "--output-len-mean",
            str(args.max_new_tokens),
            "--output-len-sigma",
            "0.1",
            *args.server_flag,
        ]
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, timeout=30, process=server)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.clients) as pool:
            results = pool.starmap(_client_process, [(url, args, index) for index in range(args.clients)])
        requests = sum(r[0] for r in results)
        tokens = sum(r[1] for r in results)
        errors = sum(r[2] for r in results)
        elapsed = max(r[3] for r in results)
        print(
            f"{requests / elapsed:.0f} requests/s, {tokens / elapsed:.0f} output tokens/s "
            f"({requests} requests in {elapsed:.2f} s, {errors} errors; "
            f"{args.clients} client process(es) x {args.concurrency} in flight, "
            f"{args.client} client, prompt {args.prompt_len} ids, max_new_tokens {args.max_new_tokens})"
        )
        print("RESULT " + json.dumps({"standin_requests_per_s": requests / elapsed}))
        return 0 if errors == 0 else 1
    finally:
        server.terminate()
        server.wait(timeout=30)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2, help="client processes (default: 2)")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="requests in flight per client (default: 32)"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measured time (default: 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up time (default: 1)")
    parser.add_argument("--prompt-len", type=int, default=100, help="prompt ids (default: 100)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="max_new_tokens (default: 128)")
    parser.add_argument(
        "--client", choices=("raw", "aiohttp", "httpx"), default="raw", help="client kind (default: raw)"
    )
    parser.add_argument("--server-flag", action="append", default=[], help="extra stand-in flag (repeatable)")
    return parser.parse_args()


def _client_process(url: str, args: argparse.Namespace, index: int) -> tuple[int, int, int, float]:
    return asyncio.run(_drive(url, args, index))


async def _drive(url: str, args: argparse.Namespace, index: int) -> tuple[int, int, int, float]:
    rng = random.Random(index)
    bodies = [
        json.dumps(
            {
                "input_ids": [rng.randrange(9, 4096) for _ in range(args.prompt_len)],
                "sampling_params": {"max_new_tokens": args.max_new_tokens, "temperature": 0.7},
            }
        ).encode()
        for _ in range(256)
    ]
    post = await _poster(url, args.client, args.concurrency)
    counts = [0, 0, 0]
    measuring = False
    stop_at = time.monotonic() + args.warmup + args.seconds

    async def worker(offset: int) -> None:
        i = offset
        while time.monotonic() < stop_at:
            status, tokens = await post.send(bodies[i % len(bodies)])
            i += args.concurrency
            if measuring:
                counts[0] += 1
                counts[1] += tokens
                counts[2] += status != 200

    tasks = [asyncio.create_task(worker(i)) for i in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    measuring = True
    started = time.monotonic()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    await post.close()
    return counts[0], counts[1], counts[2], elapsed


async def _poster(url: str, kind: str, concurrency: int) -> _Poster:
    if kind == "httpx":
        return _HttpxPoster(url, concurrency)
    if kind == "aiohttp":
        return _AiohttpPoster(url, concurrency)
    return _RawPoster(url)


class _Poster:
    async def send(self, body: bytes) -> tuple[int, int]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class _RawPoster(_Poster):
    """One keep-alive connection per worker task; requires Content-Length responses."""

    _TOKENS = re.compile(rb'"completion_tokens":(\d+)')

    def __init__(self, url: str) -> None:
        self._host, port = url.removeprefix("http://").split(":")
        self._port = int(port)
        self._connections: dict[asyncio.Task[Any] | None, tuple[Any, Any]] = {}

    async def send(self, body: bytes) -> tuple[int, int]:
        task = asyncio.current_task()
        if task not in self._connections:
            self._connections[task] = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._connections[task]
        head = (
            f"POST /generate HTTP/1.1\r\nHost: {self._host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        status = int(headers[9:12])
        found = re.search(rb"(?i)content-length: *(\d+)", headers)
        if found is None:
            raise RuntimeError(f"a response without Content-Length: {headers!r}")
        length = int(found.group(1))
        data = await reader.readexactly(length)
        match = self._TOKENS.search(data)
        return status, int(match.group(1)) if match and status == 200 else 0

    async def close(self) -> None:
        for _, writer in self._connections.values():
            writer.close()


class _AiohttpPoster(_Poster):
    def __init__(self, url: str, concurrency: int) -> None:
        import aiohttp

        self._url = f"{url}/generate"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency),
            headers={"Content-Type": "application/json"},
        )

    async def send(self, body: bytes) -> tuple[int, int]:
        async with self._session.post(self._url, data=body) as response:
            data = await response.read()
            if response.status != 200:
                return response.status, 0
            return 200, json.loads(data)["meta_info"]["completion_tokens"]

    async def close(self) -> None:
        await self._session.close()


class _HttpxPoster(_Poster):
    def __init__(self, url: str, concurrency: int) -> None:
        self._url = f"{url}/generate"
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )

    async def send(self, body: bytes) -> tuple[int, int]:
        response = await self._client.post(self._url, content=body)
        if response.status_code != 200:
            return response.status_code, 0
        return 200, response.json()["meta_info"]["completion_tokens"]

    async def close(self) -> None:
        await self._client.aclose()


if __name__ == "__main__":
    sys.exit(main())
