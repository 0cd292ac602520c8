"""Worker CPU per record against a stand-in that answers at once (``--latency-model none``).

The worker runs as a child process twice, on ``--small`` and ``--large`` prompt counts, and
exits when idle; CPU per record is the slope (Δ child CPU seconds / Δ records), so start-up and
the idle wait cancel out. Baselines, measured in the same run: the same worker writing
GenerationRecord v1 (``--generation-schema-version 1``, Avro int arrays), and the CPU of a bare
HTTP client sending the same requests (no Kafka, no Avro, no checks) — the share HTTP alone costs.
``--profile`` also runs one worker in-process under cProfile (CPU of the event-loop thread only;
the Kafka consumer, its IO thread and the producer's sender thread are not in it) and prints
where that CPU goes, by package.

    python -m bench.worker_cpu --small 500 --large 2500 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import time
from collections import defaultdict

import httpx

from bench.worker_common import broker, fresh_topics, prompt, standin, worker_cmd
from eaglefeed.consumers.generate.inference import make_http_client

SERVER = ["--latency-model", "none", "--output-len-mean", "64", "--output-len-sigma", "0.3"]


def main() -> int:
    args = _parse_args()
    with broker(args.bootstrap_servers) as bootstrap, standin(*SERVER) as url:
        per_version = {}
        for version in ("2", "1"):  # interleaved small/large runs would be fairer; load drifts slowly
            small = _worker_cpu(bootstrap, url, args.small, args, version)
            large = _worker_cpu(bootstrap, url, args.large, args, version)
            per_version[version] = (large - small) / (args.large - args.small)
            print(f"worker writing v{version}: {per_version[version] * 1000:.3f} ms CPU per record "
                  f"({small:.2f}s for {args.small}, {large:.2f}s for {args.large})")
        per_record = per_version["2"]
        base = asyncio.run(_httpx_cpu(url, args))
        print(f"baseline (the worker's HTTP client, request + JSON only): {base * 1000:.3f} ms; "
              f"worker / baseline = {per_record / base:.2f}; v2 / v1 = {per_record / per_version['1']:.2f}")
        print("RESULT " + json.dumps({"worker_cpu_ms_per_record": per_record * 1000,
                                      "worker_v1_cpu_ms_per_record": per_version["1"] * 1000,
                                      "worker_records_per_cpu_second": 1 / per_record,
                                      "http_client_cpu_ms_per_request": base * 1000}))
        if args.profile:
            _profile(bootstrap, url, args)
    return 0


def _worker_cpu(bootstrap: str, url: str, count: int, args: argparse.Namespace, version: str) -> float:
    kafka = fresh_topics(bootstrap, count, max_new_tokens=128)
    proc = subprocess.Popen(worker_cmd(kafka, url, "--concurrency", str(args.concurrency),
                                       "--exit-when-idle", "2", "--generation-schema-version", version),
                            stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, f"worker exited with {proc.returncode}"
    return usage.ru_utime + usage.ru_stime


async def _httpx_cpu(url: str, args: argparse.Namespace) -> float:
    """CPU per request of the worker's own HTTP client (httpx over aiohttp), bodies prepared."""
    count = args.large - args.small
    bodies = [json.dumps({"input_ids": prompt(i, max_new_tokens=128)["input_ids"],
                          "sampling_params": {"max_new_tokens": 128}, "stream": False}) for i in range(count)]
    async with make_http_client(connections=args.concurrency, timeout=httpx.Timeout(60)) as http:
        queue = list(range(count))

        async def loop() -> None:
            while queue:
                resp = await http.post(f"{url}/generate", content=bodies[queue.pop()],
                                       headers={"Content-Type": "application/json"})
                json.loads(resp.content)

        started = time.process_time()
        await asyncio.gather(*(loop() for _ in range(args.concurrency)))
        return (time.process_time() - started) / count


def _profile(bootstrap: str, url: str, args: argparse.Namespace) -> None:
    from eaglefeed.consumers.generate import run_worker
    from eaglefeed.core.config import WorkerConfig
    from eaglefeed.core.lifecycle import StopSignal

    kafka = fresh_topics(bootstrap, args.large, max_new_tokens=128)
    cfg = WorkerConfig(kafka=kafka, sglang_urls=(url,), concurrency=args.concurrency, exit_when_idle=2)
    profiler = cProfile.Profile(time.thread_time)  # CPU of the event-loop thread, not wall time
    profiler.enable()
    run_worker(cfg, stop=StopSignal())
    profiler.disable()
    stats = pstats.Stats(profiler)
    by_package: dict[str, float] = defaultdict(float)
    for (path, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
        tottime = row[2]
        by_package[_package(path)] += tottime
    total = sum(by_package.values())
    print(f"event-loop thread, {args.large} records: {total:.2f}s CPU")
    for package, seconds in sorted(by_package.items(), key=lambda kv: -kv[1])[:12]:
        per_record = seconds / args.large * 1000
        print(f"  {package:<28} {seconds:6.2f}s  {seconds / total:5.1%}  {per_record:.3f} ms/record")


def _package(path: str) -> str:
    if "site-packages/" in path:
        return path.split("site-packages/")[1].split("/")[0]
    for mark in ("consumers/", "eaglefeed/", "schemas/"):
        if mark in path:
            return mark.rstrip("/") + "/" + path.split(mark)[1]
    if "importlib" in path:
        return "importlib (failed imports)"
    if path.startswith("~") or "<" in path:
        return "builtins (json, socket, ...)"
    return "stdlib " + path.rsplit("/", 1)[-1]


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=None, help="use this broker instead of starting one")
    p.add_argument("--small", type=int, default=500)
    p.add_argument("--large", type=int, default=2500)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--profile", action="store_true", help="also profile one in-process run")
    return p.parse_args()


if __name__ == "__main__":
    raise SystemExit(main())
