"""How busy one generate worker keeps an emulated SGLang server (continuous-batching stand-in).

Busy fraction = Δrunning_request_seconds / (Δt × max_running_requests), read from the stand-in's
/metrics over a window after a warm-up. Baseline, measured in the same run: a bare closed-loop
httpx client holding ``--concurrency`` requests in flight against the same server (no Kafka,
no checks, no publishing) — the most a client can get out of the server.

    python -m bench.worker_saturation --seconds 30 --concurrency 64,80,256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import time

import httpx

from bench.worker_common import (
    broker,
    busy_counters,
    busy_fraction,
    fresh_topics,
    prompt,
    standin,
    worker_cmd,
)


def main() -> int:
    args = _parse_args()
    server_flags = ["--latency-model", "batching", "--max-running-requests", str(args.max_running),
                    "--decode-step-ms", str(args.decode_step_ms),
                    "--output-len-mean", str(args.output_len_mean)]
    step = args.decode_step_ms + 0.1 * args.max_running
    rate = args.max_running / (args.output_len_mean * step / 1000)  # requests/s the server can finish
    count = int(rate * (args.seconds + args.warmup) * 2) + 4 * max(args.concurrency)
    print(f"stand-in: {args.max_running} slots, ~{rate:.1f} requests/s; {count} prompts per run")
    with broker(args.bootstrap_servers) as bootstrap, standin(*server_flags) as url:
        in_flight = max(args.max_running, min(args.concurrency))
        base = asyncio.run(_baseline(url, in_flight, args))
        print(f"baseline (bare httpx, {in_flight} in flight): busy {base:.3f}")
        for concurrency in args.concurrency:
            kafka = fresh_topics(bootstrap, count, max_new_tokens=args.max_new_tokens)
            proc = subprocess.Popen(worker_cmd(kafka, url, "--concurrency", str(concurrency),
                                               "--drain-seconds", "2"))
            try:
                time.sleep(args.warmup)
                before = busy_counters(url)
                time.sleep(args.seconds)
                busy = busy_fraction(before, busy_counters(url))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            print(f"worker --concurrency {concurrency}: busy {busy:.3f}  ({busy / base:.3f} x baseline)")
            print("RESULT " + json.dumps({f"busy_worker_c{concurrency}": busy, "busy_baseline": base}))
            _drain_server(url)
    return 0


async def _baseline(url: str, concurrency: int, args: argparse.Namespace) -> float:
    stop = time.monotonic() + args.warmup + args.seconds
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency)) as http:

        async def loop(index: int) -> None:
            i = index
            while time.monotonic() < stop:
                p = prompt(i, max_new_tokens=args.max_new_tokens)
                params = {"max_new_tokens": args.max_new_tokens, "temperature": 0.7, "sampling_seed": i}
                body = {"input_ids": p["input_ids"], "sampling_params": params, "stream": False}
                await http.post(f"{url}/generate", content=json.dumps(body))
                i += concurrency

        tasks = [asyncio.create_task(loop(i)) for i in range(concurrency)]
        await asyncio.sleep(args.warmup)
        before = await asyncio.to_thread(busy_counters, url)
        await asyncio.sleep(args.seconds)
        busy = busy_fraction(before, await asyncio.to_thread(busy_counters, url))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    _drain_server(url)
    return busy


def _drain_server(url: str) -> None:
    """Abort what a stopped client left running, so the next run starts from an idle server."""
    httpx.post(f"{url}/abort_request", json={"abort_all": True}, timeout=10)
    time.sleep(1.0)


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=None, help="use this broker instead of starting one")
    p.add_argument("--seconds", type=float, default=30.0, help="measurement window per run")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before the window opens")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[64, 80, 256],
                   help="worker --concurrency values to run, comma-separated")
    p.add_argument("--max-running", type=int, default=64, help="stand-in --max-running-requests")
    p.add_argument("--decode-step-ms", type=float, default=10.0)
    p.add_argument("--output-len-mean", type=float, default=200.0)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    return p.parse_args()


if __name__ == "__main__":
    raise SystemExit(main())
