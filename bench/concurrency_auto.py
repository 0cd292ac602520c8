"""``--concurrency auto`` against a sweep of fixed settings, on the batching stand-in at two capacities.

For each capacity (``--max-running-requests`` of one SGLang stand-in with the batching latency
model, pinned to its own core) one generate worker and one sink run a fresh topic of synthetic
prompts once per setting: ``--concurrency`` 16 … 1024, then ``auto`` (nothing tuned). Figures
of each run come from its dataset: throughput is rows per second whose ``created_at`` falls in a
steady window (after ``--warmup`` seconds from the first row, ``--seconds`` long, while the
backlog lasts), p50 the median ``latency_seconds`` (the request as the worker timed it: the
server's queue and batch) of those rows. Every run checks the dataset like the other benchmarks:
as many rows as prompts, every prompt id once, no id twice. Done when auto reaches ≥ 95 % of the
best fixed setting's throughput with a p50 ≤ 1.3 × that setting's, at every capacity.

    python -m bench.concurrency_auto                       # both capacities
    python -m bench.concurrency_auto --capacities 64 --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench import harness
from bench.worker_common import fresh_topics
from eaglefeed.core.config import KafkaConfig

OUTPUT_LEN, MAX_NEW_TOKENS, PROMPT_LEN = 32, 96, 64
STANDIN_FLAGS = ("--latency-model", "batching", "--output-len-mean", str(OUTPUT_LEN), "--output-len-sigma",
                 "0.5", "--tool-call-fraction", "0", "--length-fraction", "0", "--think-fraction", "0")
SETTINGS = ("16", "32", "64", "128", "256", "512", "1024", "auto")
QUICK_SETTINGS = ("32", "64", "256", "1024", "auto")


def expected_rate(capacity: int, in_flight: int) -> float:
    """Requests/s the stand-in's batching model finishes at ``in_flight`` (to size the backlog)."""
    running = min(capacity, in_flight)
    admitted = running / OUTPUT_LEN  # per step: one request finishes (and one enters) per output length
    step_ms = 10.0 + 0.1 * running + 0.02 * PROMPT_LEN * admitted
    return running / (OUTPUT_LEN * step_ms / 1000)


def run_one(bootstrap: str, url: str, setting: str, *, capacity: int, warmup: float, seconds: float,
            work: Path) -> dict[str, Any]:
    """One worker + sink on a fresh topic at ``setting``; its figures and dataset checks."""
    # a backlog that outlasts the window: what the setting finishes in it, plus what it holds
    # (auto's limit ends near the capacity; the backlog is sized from it, auto is told nothing)
    in_flight = 3 * capacity if setting == "auto" else 2 * int(setting)
    count = int(expected_rate(capacity, in_flight) * (warmup + seconds) * 1.3) + in_flight
    kafka = fresh_topics(bootstrap, count, max_new_tokens=MAX_NEW_TOKENS, length=PROMPT_LEN)
    out = work / f"dataset-{capacity}-{setting}"
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", kafka.topic_prefix]
    worker_log = work / f"worker-{capacity}-{setting}.log"
    procs = [harness.spawn(["generate", "--sglang-url", url, "--concurrency", setting, "--settle-seconds", "0",
                            "--progress-seconds", "2", *common], worker_log),
             harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                           work / f"sink-{capacity}-{setting}.log")]
    try:
        deadline = time.monotonic() + 60 + count / max(1.0, expected_rate(capacity, 16))
        while _rows(out) < count:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"run {setting} at capacity {capacity} failed; logs in {work}")
            time.sleep(0.2)
    finally:
        for proc in procs:
            harness.stop(proc)
    figures = _figures(out, kafka, count, warmup=warmup, seconds=seconds)
    figures["limit"] = _last_limit(worker_log) if setting == "auto" else None
    return figures


def _rows(out: Path) -> int:
    try:
        return harness.dataset_rows(out)
    except (FileNotFoundError, OSError):
        return 0  # the sink has written no manifest yet


def _figures(out: Path, kafka: KafkaConfig, count: int, *, warmup: float, seconds: float) -> dict[str, Any]:
    table = pq.read_table(out / "segments", columns=["id", "prompt_id", "created_at", "latency_seconds"])
    ids, prompt_ids = table.column("id").to_pylist(), table.column("prompt_id").to_pylist()
    expected = {hashlib.sha256(f"bench{i}".encode()).hexdigest()[:24] for i in range(count)}
    checks = {"rows": len(ids), "prompts": count, "ids_unique": len(set(ids)) == len(ids),
              "every_prompt_once": sorted(prompt_ids) == sorted(expected)}
    created = [t.timestamp() for t in table.column("created_at").to_pylist()]
    latency = table.column("latency_seconds").to_pylist()
    start = min(created) + warmup
    end = min(start + seconds, max(created) - 1.0)  # while the backlog lasts (not the drain at the end)
    window = [lat for t, lat in zip(created, latency, strict=True) if start <= t < end]
    return {"throughput": len(window) / (end - start) if end > start else 0.0,
            "p50": statistics.median(window) if window else float("nan"),
            "window_seconds": round(end - start, 1),
            "ok": checks["ids_unique"] and checks["every_prompt_once"] and checks["rows"] == count, **checks}


def _last_limit(log: Path) -> str | None:
    lines = re.findall(r"concurrency limits: (.*)", log.read_text(errors="replace"))
    return lines[-1] if lines else None


def sweep(capacity: int, settings: tuple[str, ...], *, warmup: float, seconds: float) -> dict[str, Any]:
    """Every setting at one capacity, then the verdict of auto against the best fixed one."""
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-auto-") as tmp, harness.broker() as bootstrap, \
            harness.standins(1, *STANDIN_FLAGS, "--max-running-requests", str(capacity)) as urls:
        for setting in settings:
            runs[setting] = run_one(bootstrap, urls[0], setting, capacity=capacity, warmup=warmup,
                                    seconds=seconds, work=Path(tmp))
            r = runs[setting]
            print(f"capacity {capacity} --concurrency {setting}: {r['throughput']:.1f} rows/s, "
                  f"p50 {r['p50']:.3f} s, checks {'ok' if r['ok'] else 'FAILED'} ({r['rows']} rows)"
                  + (f", limit {r['limit']}" if r["limit"] else ""), flush=True)
    fixed = {k: v for k, v in runs.items() if k != "auto"}
    best = max(fixed, key=lambda k: fixed[k]["throughput"])
    auto = runs["auto"]
    ratio = auto["throughput"] / fixed[best]["throughput"]
    p50_ratio = auto["p50"] / fixed[best]["p50"]
    return {"capacity": capacity, "runs": runs, "best_fixed": best, "throughput_ratio": round(ratio, 3),
            "p50_ratio": round(p50_ratio, 3), "met": ratio >= 0.95 and p50_ratio <= 1.3,
            "checks_ok": all(r["ok"] for r in runs.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacities", default="64,512", help="stand-in slots, comma-separated")
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds from the first row before the window")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the measured window")
    parser.add_argument("--quick", action="store_true", help=f"only the settings {', '.join(QUICK_SETTINGS)}")
    args = parser.parse_args()
    harness.SERVER_CORES, _ = harness.pin_cores()
    results = [sweep(int(c), QUICK_SETTINGS if args.quick else SETTINGS, warmup=args.warmup,
                     seconds=args.seconds) for c in args.capacities.split(",")]
    for r in results:
        best = r["runs"][r["best_fixed"]]
        auto = r["runs"]["auto"]
        print(f"capacity {r['capacity']}: best fixed {r['best_fixed']} {best['throughput']:.1f} rows/s "
              f"p50 {best['p50']:.3f} s; auto {auto['throughput']:.1f} rows/s p50 {auto['p50']:.3f} s; "
              f"throughput {r['throughput_ratio']:.3f}x, p50 {r['p50_ratio']:.3f}x; "
              f"{'MET' if r['met'] else 'MISSED'}; dataset checks {'ok' if r['checks_ok'] else 'FAILED'}")
    print("RESULTS " + json.dumps(results))
    flat = {}  # for run_all: one figure per key
    for r in results:
        best, auto, c = r["runs"][r["best_fixed"]], r["runs"]["auto"], r["capacity"]
        flat.update({f"auto{c}_throughput": auto["throughput"], f"auto{c}_p50": auto["p50"],
                     f"auto{c}_best_throughput": best["throughput"], f"auto{c}_best_p50": best["p50"],
                     f"auto{c}_throughput_ratio": r["throughput_ratio"], f"auto{c}_p50_ratio": r["p50_ratio"],
                     f"auto{c}_checks_ok": float(r["checks_ok"])})
    print("RESULT " + json.dumps(flat))
    return 0 if all(r["met"] and r["checks_ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
