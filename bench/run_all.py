"""``make bench``: every benchmark, one summary table of figures, ratios and targets.

Each figure is measured in this run, next to its baseline from the same run; timings on a
shared 2-core machine are noisy, so ratios matter more than absolute numbers.

    python -m bench.run_all            # full, under 22 minutes (concurrency_auto: about 7)
    python -m bench.run_all --quick    # under 4 minutes (concurrency_auto: about 2)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import harness, pipeline_vs_direct

BENCH = Path(__file__).resolve().parent

# (script, quick args, full args)
SCRIPTS = [
    ("standin_throughput.py", ["--seconds", "2"], ["--seconds", "5"]),
    ("worker_cpu.py", ["--small", "300", "--large", "1300"], ["--small", "500", "--large", "3000"]),
    ("worker_saturation.py", ["--seconds", "4", "--warmup", "3", "--concurrency", "256"],
     ["--seconds", "20", "--warmup", "8", "--concurrency", "64,256"]),
    ("producer_throughput.py", ["--prompts", "5000", "--baseline-prompts", "500", "--workers", "0"],
     ["--prompts", "50000", "--baseline-prompts", "2000", "--workers", "0", "1", "2"]),
    ("sink_write.py", ["--rows", "1500", "--repeat", "1", "--kafka"], ["--rows", "6000", "--repeat", "3", "--kafka"]),
    ("wire_size.py", ["--rows", "200"], ["--rows", "1000"]),
    ("compaction.py", ["--segments", "4", "--rows", "250"], ["--segments", "20", "--rows", "500"]),
    ("memory.py", ["--backlogs", "5000", "20000", "--seconds", "4"],
     ["--backlogs", "20000", "100000", "--seconds", "20"]),
    ("converse_stage.py", ["--conversations", "20", "--repeats", "2"],
     ["--conversations", "100", "--repeats", "5", "--kafka"]),
    ("conversation_affinity.py", ["--conversations", "40"], ["--conversations", "200"]),
    ("store_check.py", ["--tokens", "2048", "--repeat", "3"], ["--tokens", "2048", "--repeat", "9"]),
    ("concurrency_auto.py", ["--capacities", "64", "--quick", "--warmup", "4", "--seconds", "6"],
     ["--quick"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs, under 2 minutes")
    parser.add_argument("--json-out", type=Path, help="also write every figure as JSON")
    args = parser.parse_args()
    started = time.monotonic()
    figures: dict[str, float] = {}
    for script, quick, full in SCRIPTS:
        figures.update(_run_script(script, quick if args.quick else full))
    # The side-by-side runs give the stand-ins a core of their own (see harness.pin_cores).
    harness.SERVER_CORES, _ = harness.pin_cores()
    prompts = 400 if args.quick else 3000
    one = pipeline_vs_direct.run(prompts=prompts, servers=1, workers=1, concurrency=128)
    figures.update({f"pvd1_{k}": v for k, v in one.items()})
    if not args.quick:
        two = pipeline_vs_direct.run(prompts=prompts, servers=2, workers=2, concurrency=128)
        figures.update({f"pvd2_{k}": v for k, v in two.items()})
        for n in (1, 2, 4):
            scaled = pipeline_vs_direct.scaling(prompts=2000, workers=n, concurrency=128)
            figures.update({f"scale{n}_{k}": v for k, v in scaled.items()})
    print(_table(figures))
    print(f"\n(all benchmarks took {time.monotonic() - started:.0f}s; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=2))
    return 0


def _run_script(script: str, extra: list[str]) -> dict[str, float]:
    print(f"==> {script} {' '.join(extra)}", flush=True)
    # As a module from the repo root: the scripts import their helpers as bench.* (only eaglefeed is installed).
    done = subprocess.run([sys.executable, "-m", f"bench.{script.removesuffix('.py')}", *extra],
                          capture_output=True, text=True, cwd=BENCH.parent, timeout=900)
    results: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            results.update(json.loads(line[7:]))
        else:
            print(f"    {line}", flush=True)
    if done.returncode != 0:
        print(f"    {script} failed (exit {done.returncode}):\n{done.stderr[-2000:]}", flush=True)
    return results


def _table(f: dict[str, float]) -> str:
    rows = [("benchmark", "figure", "baseline (same run)", "ratio", "target")]

    def add(name: str, value: str, base: str = "", ratio: str = "", target: str = "") -> None:
        rows.append((name, value, base, ratio, target))

    def g(key: str, fmt: str = "{:.0f}") -> str:
        return fmt.format(f[key]) if key in f else "n/a"

    def ratio(a: str, b: str) -> str:
        return f"{f[a] / f[b]:.2f}" if a in f and b in f and f[b] else "n/a"

    add("1. pipeline vs direct, 1 worker / 1 server", f"{g('pvd1_pipeline_prompts_per_s', '{:.1f}')} prompts/s",
        f"{g('pvd1_direct_prompts_per_s', '{:.1f}')} prompts/s", g("pvd1_ratio", "{:.2f}"), ">= 0.95")
    add("   stand-in busy (pipeline / direct)", f"{g('pvd1_busy_pipeline', '{:.2f}')}",
        f"{g('pvd1_busy_direct', '{:.2f}')}")
    add("1. pipeline vs direct, 2 workers / 2 servers", f"{g('pvd2_pipeline_prompts_per_s', '{:.1f}')} prompts/s",
        f"{g('pvd2_direct_prompts_per_s', '{:.1f}')} prompts/s", g("pvd2_ratio", "{:.2f}"), ">= 1.0")
    add("   stand-in busy (pipeline / direct)", f"{g('pvd2_busy_pipeline', '{:.2f}')}",
        f"{g('pvd2_busy_direct', '{:.2f}')}")
    add("2. worker CPU per record (no latency)", f"{g('worker_cpu_ms_per_record', '{:.2f}')} ms",
        f"{g('http_client_cpu_ms_per_request', '{:.2f}')} ms (HTTP only)",
        ratio("worker_cpu_ms_per_record", "http_client_cpu_ms_per_request"), "<= 0.6 ms")
    add("   worker CPU, writing v1 (same run)", f"{g('worker_v1_cpu_ms_per_record', '{:.2f}')} ms", "",
        ratio("worker_cpu_ms_per_record", "worker_v1_cpu_ms_per_record"), "v2 / v1")
    add("   worker records per CPU-second", g("worker_records_per_cpu_second"))
    add("   one worker keeps the server busy", g("busy_worker_c256", "{:.3f}"), g("busy_baseline", "{:.3f}"),
        ratio("busy_worker_c256", "busy_baseline"), ">= 0.95")
    best = max((v for k, v in f.items() if k.startswith("producer_w") and k.endswith("_per_s")), default=None)
    if best is not None:
        f["producer_best"] = best
    add("3. producer, short prompts", f"{g('producer_best')} prompts/s",
        f"{g('producer_baseline_prompts_per_s')} prompts/s", ratio("producer_best", "producer_baseline_prompts_per_s"),
        ">= 5000/s")
    add("4. sink write, ~2000-token rows", f"{g('sink_rows_per_s')} rows/s", f"{g('sink_baseline_rows_per_s')} rows/s",
        ratio("sink_rows_per_s", "sink_baseline_rows_per_s"), ">= 20000/s")
    add("   sink write, v1 messages (same run)", f"{g('sink_v1_rows_per_s')} rows/s", "",
        ratio("sink_rows_per_s", "sink_v1_rows_per_s"), "v2 / v1")
    add("   sink through Kafka, end to end", f"{g('sink_through_kafka_rows_per_s')} rows/s",
        f"{g('sink_v1_through_kafka_rows_per_s')} rows/s (v1)",
        ratio("sink_through_kafka_rows_per_s", "sink_v1_through_kafka_rows_per_s"), ">= 6000/s")
    for kind in ("uniform", "zipf", "text"):
        add(f"   wire size after zstd, {kind} ids", f"{g(f'wire_v2_{kind}_bytes')} B/record (v2)",
            f"{g(f'wire_v1_{kind}_bytes')} B/record (v1)", ratio(f"wire_v2_{kind}_bytes", f"wire_v1_{kind}_bytes"))
    add("   compaction", f"{g('compaction_rows_per_s')} rows/s", f"{g('compaction_baseline_rows_per_s')} rows/s",
        ratio("compaction_rows_per_s", "compaction_baseline_rows_per_s"))
    for key in sorted(k for k in f if k.startswith(("worker_peak", "sink_peak"))):
        proc, backlog = key.split("_peak_rss_mb_")
        add(f"5. {proc} peak RSS, backlog {int(backlog):,}", f"{f[key]:.0f} MB", target="< 500 MB, flat")
    for n in (1, 2, 4):
        if f"scale{n}_prompts_per_s" in f:
            add(f"6. scaling: {n} worker(s), {n} server(s)", f"{f[f'scale{n}_prompts_per_s']:.1f} prompts/s",
                "1 worker" if n > 1 else "", ratio(f"scale{n}_prompts_per_s", "scale1_prompts_per_s"),
                f"~{n}.0")
    for mode in ("rerender", "tokens"):
        add(f"7. converse step per turn, {mode}", f"{g(f'converse_{mode}_us_per_turn')} us",
            f"{g(f'converse_{mode}_single_turn_us')} us (single-turn produce)", g(f"converse_{mode}_ratio", "{:.2f}"))
    if "converse_turn_delay_ms_p50" in f:
        add("   pipeline delay per turn (p50 / p90)",
            f"{g('converse_turn_delay_ms_p50')} / {g('converse_turn_delay_ms_p90')} ms")
    add("8. affinity: turns >= 1 prompt tokens from the cache", g("aff_affinity_cached_later_turns", "{:.1%}"),
        f"{g('aff_least_cached_later_turns', '{:.1%}')} (least-outstanding)", target=">= 80 %")
    add("   prefill tokens, 4 servers, 3-turn conversations", g("aff_affinity_prefill_tokens"),
        f"{g('aff_least_prefill_tokens')} (least-outstanding)",
        ratio("aff_affinity_prefill_tokens", "aff_least_prefill_tokens"))
    for c in (64, 512):
        if f"auto{c}_throughput" in f:
            add(f"9. --concurrency auto, {c} slots: rows/s (p50 s)",
                f"{g(f'auto{c}_throughput', '{:.1f}')} ({g(f'auto{c}_p50', '{:.2f}')})",
                f"{g(f'auto{c}_best_throughput', '{:.1f}')} ({g(f'auto{c}_best_p50', '{:.2f}')}) best fixed",
                f"{g(f'auto{c}_throughput_ratio', '{:.2f}')} ({g(f'auto{c}_p50_ratio', '{:.2f}')})",
                ">= 0.95 (<= 1.3)")
    add("10. check of a 64 MiB row in the store (ranges)", f"{g('store_ranged_check_ms', '{:.1f}')} ms, "
        f"{g('store_ranged_check_kib')} KiB", f"{g('store_download_check_ms')} ms (download + check)",
        g("store_check_ratio", "{:.3f}"), "bytes read <= 0.01")
    add("   stand-in capacity (no latency)", f"{g('standin_requests_per_s')} req/s", target=">= 2000/s")
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
