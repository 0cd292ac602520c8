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

``--engine vllm`` runs the same sweep, checks and verdict against one real vLLM instead (its CPU
build and the tiny seeded Llama of ``bench/vllm_pipeline_vs_direct.py``, whose helpers start it),
pinned to core 1 with the broker, worker and sink on core 0. Its capacity is its own scheduler's:
``max_num_seqs`` (128, vLLM CPU's default for its API server; the helpers pass none). The prompts
ask for what that benchmark asks (32 new tokens, temperature 0.6, no top-k/top-p, seeded), and each
run also reports vLLM's ``/metrics`` over its window (running and waiting requests, their means).
Needs ``make engine-env`` (or ``EAGLEFEED_ENGINE_VENV``).

``--rounds N`` runs every setting N times, in rounds: each round all the settings once, each round
in its own order (shuffled, seeded by ``--seed``; one round keeps the listed order). The verdict
then compares auto's *median* throughput (and p50) over the rounds with the best fixed setting's
median, so a setting's figure no longer rests on one pass that a drift of the shared machine
happened to favour; each round's own verdict is reported beside it. On vLLM, whose rate drifts by
up to a fifth between passes minutes apart, the default is 3 rounds (about 17 minutes); on the
stand-in, 1.

    python -m bench.concurrency_auto                       # both capacities
    python -m bench.concurrency_auto --capacities 64 --quick
    python -m bench.concurrency_auto --engine vllm         # 3 rounds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench import harness, vllm_probe
from bench.worker_common import fresh_topics
from eaglefeed.core.config import KafkaConfig

OUTPUT_LEN, MAX_NEW_TOKENS, PROMPT_LEN = 32, 96, 64
STANDIN_FLAGS = ("--latency-model", "batching", "--output-len-mean", str(OUTPUT_LEN), "--output-len-sigma",
                 "0.5", "--tool-call-fraction", "0", "--length-fraction", "0", "--think-fraction", "0")
SETTINGS = ("16", "32", "64", "128", "256", "512", "1024", "auto")
QUICK_SETTINGS = ("32", "64", "256", "1024", "auto")
# vLLM CPU's default max_num_seqs for its OpenAI server (vllm/engine/arg_utils.py: 128 × world size);
# bench/vllm_pipeline_vs_direct.vllm() passes no --max-num-seqs, so at most 128 run at once there.
VLLM_MAX_NUM_SEQS = 128
VLLM_SAMPLING = {"temperature": 0.6, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "stop_token_ids": []}


@dataclass(frozen=True)
class Target:
    """The server one sweep runs against, and what sizes each run's backlog for it."""

    label: str  # how the printed lines and the results name it
    key: str  # its figures' prefix in RESULT (auto64_…, autovllm_…)
    url: str
    capacity: int  # requests it runs at once (the stand-in's slots, vLLM's max_num_seqs)
    rate: Callable[[int], float]  # rows/s it is expected to finish at that many in flight
    max_new_tokens: int
    sampling: dict[str, Any] | None = None  # replaces the synthetic prompts' sampling params
    sampler: vllm_probe.Sampler | None = None  # reads its /metrics over each run (vLLM only)


def expected_rate(capacity: int, in_flight: int) -> float:
    """Requests/s the stand-in's batching model finishes at ``in_flight`` (to size the backlog)."""
    running = min(capacity, in_flight)
    admitted = running / OUTPUT_LEN  # per step: one request finishes (and one enters) per output length
    step_ms = 10.0 + 0.1 * running + 0.02 * PROMPT_LEN * admitted
    return running / (OUTPUT_LEN * step_ms / 1000)


def vllm_expected_rate(in_flight: int) -> float:
    """Rows/s vLLM CPU is expected to finish at ``in_flight`` (to size the backlog, on the high side).

    Fitted to the tiny Llama on one core at 32 new tokens: one request ~57 ms alone, 64 in flight
    ~150 rows/s (docs/BENCHMARKS.md); a little per-sequence cost below that (5 ms, not 5.8), so
    that the backlog outlasts the window rather than the window being cut short. What vLLM cannot
    run at once (beyond max_num_seqs) waits and adds nothing.
    """
    running = min(VLLM_MAX_NUM_SEQS, max(in_flight, 1))
    return running / (0.057 + 0.005 * running)


def run_one(bootstrap: str, target: Target, setting: str, *, warmup: float, seconds: float,
            work: Path, tag: str = "") -> dict[str, Any]:
    """One worker + sink on a fresh topic at ``setting``; its figures and dataset checks."""
    # a backlog that outlasts the window: what the setting finishes in it, plus what it holds
    # (auto's limit ends near the capacity; the backlog is sized from it, auto is told nothing)
    in_flight = 3 * target.capacity if setting == "auto" else 2 * int(setting)
    count = int(target.rate(in_flight) * (warmup + seconds) * 1.3) + in_flight
    kafka = fresh_topics(bootstrap, count, max_new_tokens=target.max_new_tokens, length=PROMPT_LEN,
                         sampling=target.sampling)
    name = f"{target.label.replace(' ', '')}-{setting}{tag}"
    out = work / f"dataset-{name}"
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", kafka.topic_prefix]
    worker_log = work / f"worker-{name}.log"
    procs = [harness.spawn(["generate", "--sglang-url", target.url, "--concurrency", setting, "--settle-seconds",
                            "0", "--progress-seconds", "2", *common], log=worker_log),
             harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                           log=work / f"sink-{name}.log")]
    try:
        deadline = time.monotonic() + 60 + count / max(1.0, target.rate(16))
        while _rows(out) < count:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"run {setting} on {target.label} failed; logs in {work}")
            time.sleep(0.2)
    finally:
        for proc in procs:
            harness.stop(proc)
    figures = _figures(out, kafka, count, warmup=warmup, seconds=seconds)
    figures["limit"] = _last_limit(worker_log) if setting == "auto" else None
    if target.sampler is not None:  # what the server itself saw over the window
        seen = target.sampler.window(figures["window_start"], figures["window_end"])
        # its CPU too: a run whose engine got less of its core (other sessions' work landing there)
        # is slower for a reason no concurrency setting has a part in
        figures["server"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in seen.items()
                             if k.startswith(("vllm_", "cpu_share_", "top_other")) or k.endswith("_busy")}
        figures["limits_seen"] = _limits_seen(worker_log) if setting == "auto" else None
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
            "window_seconds": round(end - start, 1), "window_start": start, "window_end": end,
            "ok": checks["ids_unique"] and checks["every_prompt_once"] and checks["rows"] == count, **checks}


def _last_limit(log: Path) -> str | None:
    lines = re.findall(r"concurrency limits: (.*)", log.read_text(errors="replace"))
    return lines[-1] if lines else None


def _limits_seen(log: Path) -> list[int]:
    """Every limit the worker logged for its one server, in order (how auto got where it ended)."""
    return [int(m) for m in re.findall(r"concurrency limits: \S+ (\d+) ", log.read_text(errors="replace"))]


def orders(settings: tuple[str, ...], rounds: int, seed: int) -> list[list[str]]:
    """Each round's order of the settings: as listed for one round, else shuffled per round (seeded)."""
    if rounds <= 1:
        return [list(settings)]
    out = []
    for r in range(rounds):
        order = list(settings)
        random.Random(seed * 1000 + r).shuffle(order)
        out.append(order)
    return out


def sweep(bootstrap: str, target: Target, settings: tuple[str, ...], *, warmup: float, seconds: float,
          work: Path, rounds: int = 1, seed: int = 0) -> dict[str, Any]:
    """Every setting against one target, ``rounds`` times, then auto against the best fixed one."""
    per_round: list[dict[str, dict[str, Any]]] = []
    plan = orders(settings, rounds, seed)
    for r, order in enumerate(plan, start=1):
        runs: dict[str, dict[str, Any]] = {}
        for setting in order:
            runs[setting] = one = run_one(bootstrap, target, setting, warmup=warmup, seconds=seconds, work=work,
                                          tag=f"-r{r}" if rounds > 1 else "")
            server = one.get("server") or {}
            print(f"{target.label}{f' round {r}' if rounds > 1 else ''} --concurrency {setting}: "
                  f"{one['throughput']:.1f} rows/s, "
                  f"p50 {one['p50']:.3f} s, checks {'ok' if one['ok'] else 'FAILED'} ({one['rows']} rows)"
                  + (f", limit {one['limit']}" if one["limit"] else "")
                  + (f", vLLM running {server.get('vllm_running_mean', -1):.1f} waiting "
                     f"{server.get('vllm_waiting_mean', -1):.1f}" if target.sampler else ""), flush=True)
        per_round.append(runs)
        if rounds > 1:
            v = verdict(runs)
            print(f"{target.label} round {r}: best fixed {v['best_fixed']}, auto {v['throughput_ratio']:.3f}x "
                  f"its throughput, {v['p50_ratio']:.3f}x its p50", flush=True)
    result = {"target": target.label, "key": target.key, "capacity": target.capacity, "orders": plan}
    if rounds <= 1:
        return {**result, **verdict(per_round[0])}
    rounds_verdicts = [{k: v for k, v in verdict(runs).items() if k != "runs"} for runs in per_round]
    return {**result, **verdict(combine(per_round)), "per_round": rounds_verdicts, "round_runs": per_round}


def combine(per_round: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each setting's median throughput and median p50 over the rounds (and every round's figure)."""
    out = {}
    for setting in per_round[0]:
        runs = [r[setting] for r in per_round]
        out[setting] = {"throughput": statistics.median(r["throughput"] for r in runs),
                        "p50": statistics.median(r["p50"] for r in runs),
                        "ok": all(r["ok"] for r in runs), "rows": sum(r["rows"] for r in runs),
                        "limit": runs[-1]["limit"],
                        "per_round": [round(r["throughput"], 1) for r in runs],
                        "per_round_p50": [round(r["p50"], 3) for r in runs]}
    return out


def verdict(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Auto against the best fixed setting by throughput: the ratios and whether the bar is met.

    Met: auto's throughput ≥ 0.95 × the best fixed setting's, its p50 ≤ 1.3 × that setting's
    (``runs``: one round's figures, or each setting's medians over the rounds from :func:`combine`).
    """
    fixed = {k: v for k, v in runs.items() if k != "auto"}
    best = max(fixed, key=lambda k: fixed[k]["throughput"])
    auto = runs["auto"]
    ratio = auto["throughput"] / fixed[best]["throughput"]
    p50_ratio = auto["p50"] / fixed[best]["p50"]
    return {"runs": runs, "best_fixed": best, "throughput_ratio": round(ratio, 3),
            "p50_ratio": round(p50_ratio, 3), "met": ratio >= 0.95 and p50_ratio <= 1.3,
            "checks_ok": all(r["ok"] for r in runs.values())}


@contextmanager
def standin_target(capacity: int) -> Iterator[Target]:
    """One batching stand-in with ``capacity`` slots (on harness.SERVER_CORES)."""
    with harness.standins(1, *STANDIN_FLAGS, "--max-running-requests", str(capacity)) as urls:
        yield Target(label=f"capacity {capacity}", key=str(capacity), url=urls[0], capacity=capacity,
                     rate=lambda n: expected_rate(capacity, n), max_new_tokens=MAX_NEW_TOKENS)


@contextmanager
def vllm_target(work: Path, core: int | None) -> Iterator[Target]:
    """One real vLLM on ``core`` (the helpers of bench/vllm_pipeline_vs_direct.py), warmed up, read."""
    from bench import vllm_pipeline_vs_direct as vb  # imported here: the stand-in sweep needs no engine

    with vb.vllm(vb.tiny_model(), work / "vllm.log", core) as (url, session), \
            vllm_probe.Sampler(url, session, every=0.5) as sampler:
        source, _ = vb.write_prompts(work / "warmup.jsonl", vb.WARMUP)
        vb.direct(source, url, 64, work, "warmup", None)  # its first batches are not in the first run
        yield Target(label="vllm", key="vllm", url=url, capacity=VLLM_MAX_NUM_SEQS, rate=vllm_expected_rate,
                     max_new_tokens=vb.MAX_NEW_TOKENS, sampling=VLLM_SAMPLING, sampler=sampler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("standin", "vllm"), default="standin",
                        help="the batching stand-in at --capacities, or one real vLLM (CPU build)")
    parser.add_argument("--capacities", default="64,512", help="stand-in slots, comma-separated")
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds from the first row before the window")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the measured window")
    parser.add_argument("--quick", action="store_true", help=f"only the settings {', '.join(QUICK_SETTINGS)}")
    parser.add_argument("--rounds", type=int, default=None,
                        help="every setting this many times, interleaved in rounds; the verdict by the medians "
                             "(default: 3 on vLLM, 1 on the stand-in)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each round's order of the settings")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (3 if args.engine == "vllm" else 1)
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    results = []
    # cores first: the broker and every stage inherit this process's affinity
    engine_core = None
    if args.engine == "vllm":
        from bench.vllm_pipeline_vs_direct import split_cores

        engine_core = split_cores()  # vLLM on core 1; this process and all it starts on core 0
    else:
        harness.SERVER_CORES, _ = harness.pin_cores()  # the stand-in on core 0, the rest on core 1
    with tempfile.TemporaryDirectory(prefix="bench-auto-") as tmp, harness.broker() as bootstrap:
        work = Path(tmp)
        if args.engine == "vllm":
            with vllm_target(work, engine_core) as target:
                results.append(sweep(bootstrap, target, settings, warmup=args.warmup, seconds=args.seconds,
                                     work=work, rounds=rounds, seed=args.seed))
        else:
            for c in args.capacities.split(","):
                with standin_target(int(c)) as target:
                    results.append(sweep(bootstrap, target, settings, warmup=args.warmup,
                                         seconds=args.seconds, work=work, rounds=rounds, seed=args.seed))
    for r in results:
        best = r["runs"][r["best_fixed"]]
        auto = r["runs"]["auto"]
        if "per_round" in r:  # each setting's figure per round, then the verdict by the medians
            for setting, fig in r["runs"].items():
                print(f"{r['target']} {setting:>5}: rows/s {fig['per_round']} median {fig['throughput']:.1f}; "
                      f"p50 {fig['per_round_p50']} median {fig['p50']:.3f} s")
            print(f"{r['target']} per round: " + "; ".join(
                f"best {v['best_fixed']} {v['throughput_ratio']:.3f}x / p50 {v['p50_ratio']:.3f}x"
                for v in r["per_round"]))
        print(f"{r['target']}{' (medians over the rounds)' if 'per_round' in r else ''}: best fixed {r['best_fixed']} {best['throughput']:.1f} rows/s "
              f"p50 {best['p50']:.3f} s; auto {auto['throughput']:.1f} rows/s p50 {auto['p50']:.3f} s; "
              f"throughput {r['throughput_ratio']:.3f}x, p50 {r['p50_ratio']:.3f}x; "
              f"{'MET' if r['met'] else 'MISSED'}; dataset checks {'ok' if r['checks_ok'] else 'FAILED'}")
    print("RESULTS " + json.dumps(results))
    flat = {}  # for run_all: one figure per key
    for r in results:
        best, auto, c = r["runs"][r["best_fixed"]], r["runs"]["auto"], r["key"]
        flat.update({f"auto{c}_throughput": auto["throughput"], f"auto{c}_p50": auto["p50"],
                     f"auto{c}_best_throughput": best["throughput"], f"auto{c}_best_p50": best["p50"],
                     f"auto{c}_throughput_ratio": r["throughput_ratio"], f"auto{c}_p50_ratio": r["p50_ratio"],
                     f"auto{c}_checks_ok": float(r["checks_ok"])})
    print("RESULT " + json.dumps(flat))
    return 0 if all(r["met"] and r["checks_ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
