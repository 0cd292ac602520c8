"""Pipeline vs the direct async script against one real vLLM (CPU build, tiny seeded Llama), cores pinned.

vLLM (API server, engine core and its worker) runs on core 1 (``taskset``), everything else on core 0:
this script, so the direct script, and the broker, producer, worker and sink it starts. So neither
side's client CPU slows the "GPU", as in a deployment, and both sides have the same one core.

(a) direct (``bench.vllm_direct``, its own process, as a user's script): tokenize every prompt with
    the chat template, then one asyncio loop (aiohttp and a semaphore) sends the ids to vLLM's token
    route ``/inference/v1/generate`` and appends JSONL. It sends exactly the sampling params the
    worker sends (every neutral setting, a 63-bit seed: ``vllm_direct.worker_params``), since vLLM
    runs that fuller set measurably faster than the script's own four settings (docs/BENCHMARKS.md);
    ``--plain-params`` sends the four instead (the baseline of runs A–F);
(b) pipeline: ``eaglefeed produce`` → Kafka → ``eaglefeed generate`` (engine detected: vLLM) →
    ``eaglefeed sink``, the producer started after the consumers joined their groups.
The passes are interleaved in ``--rounds`` rounds (default 2), alternating which side goes first:
direct, pipeline, pipeline, direct, … (ABBA), so vLLM's drift over minutes (4–9 % between passes)
weighs on both sides alike; the ratio is the pipeline passes' mean over the direct passes' mean,
with each round's own ratio beside it. Both ask for the same sampling (``max_new_tokens`` 32,
temperature 0.6, no top-k/top-p, seeded) on the same prompts with the same requests in flight.
Reported for each pass: steady-state rows/s
(between the 10 % and the 90 % row by completion time: the direct script's own stamps, the rows'
``created_at`` for the pipeline, and the sink's segment times), time to the first row, the overall
rate, and, over the steady window, vLLM's mean running and waiting requests (its ``/metrics``) and
each core's busy share; for the pipeline also each process's CPU per row, the per-stage times of
its rows (``bench.vllm_probe.stage_times``). ``--contention`` adds a direct pass with the clients'
core kept busy by a spinning process (does load on that core alone slow vLLM?). ``--profile`` adds a
pipeline pass under py-spy
(worker, sink and producer; its figures apart, since py-spy's own CPU shares their core). A warm-up
pass of 200 prompts goes first. Needs ``make engine-env``.

    python -m bench.vllm_pipeline_vs_direct --prompts 3000 --concurrency 64   # D P P D
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench import harness, vllm_probe
from bench.vllm_direct import MAX_NEW_TOKENS, render
from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.dataset.manifest import read_manifest
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.startup import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = Path(os.environ.get("EAGLEFEED_ENGINE_VENV", REPO / ".venv-engine")) / "bin" / "python"
# vLLM CPU 0.32.0's engine core dies when a seeded request's prefill is chunked (it rewinds the
# request's generator, which CPU generators refuse: "CPU Generator does not use offset"); a step
# budget above all concurrent prompts together keeps prefills whole.
STEP_TOKENS = "131072"
WARMUP = 200


def tiny_model() -> Path:
    """The tiny Llama of the engine tests (built by scripts/engine/build_tiny_model.py if absent)."""
    found = sorted((cache_dir() / "engine-models").glob("tiny-llama-*/model.safetensors"))
    if found:
        return found[-1].parent
    target = cache_dir() / "engine-models" / "tiny-llama-bench"
    subprocess.run([str(ENGINE_PYTHON), str(REPO / "scripts" / "engine" / "build_tiny_model.py"), str(target)],
                   check=True)
    return target


@contextmanager
def vllm(model: Path, log: Path, core: int | None) -> Iterator[tuple[str, int]]:
    """A vLLM server with the token route on a free port (all its processes on ``core``).

    Yields its URL and its session id (its processes' group, for their CPU time).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    pin: list[str] = []
    if core is not None:  # its OpenMP threads too (else "auto" would look for a core to leave free)
        pin, env["VLLM_CPU_OMP_THREADS_BIND"] = ["taskset", "-c", str(core)], str(core)
    cmd = [*pin, str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "2048", "--enforce-eager", "--dtype", "float32", "--enable-scale-out",
           "--max-num-batched-tokens", STEP_TOKENS]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process=proc, log=log, timeout=600)
        yield url, proc.pid
    finally:
        harness.stop(proc)


@contextmanager
def broker() -> Iterator[tuple[str, int]]:
    """A fresh local Kafka broker; yields its bootstrap address and pid (for its CPU time)."""
    with tempfile.TemporaryDirectory(prefix="eaglefeed-bench-") as tmp:
        status = localbroker.start(data_dir=Path(tmp), port=free_port(), cache_dir=cache_dir())
        try:
            yield status.bootstrap_servers or "", int((Path(tmp) / "broker.pid").read_text())
        finally:
            localbroker.stop(Path(tmp))


def split_cores(pin: bool = True) -> int | None:
    """vLLM's core (the second; None unpinned or on one core), after moving this process to the first.

    Children inherit the affinity, so this script, the direct script and every stage it spawns run
    on the first core and leave vLLM's to vLLM (call it before starting any of them).
    """
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        return None
    os.sched_setaffinity(0, {cores[0]})
    return cores[1]


def write_prompts(path: Path, count: int) -> tuple[Path, int]:
    """harness.write_prompts without the rows' own sampling params (both sides ask the same), and
    without the rows too long for the tiny model's 2048-token context; returns the file and its rows."""
    harness.write_prompts(path, count)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    kept = [{k: v for k, v in r.items() if k != "sampling_params"} for r in rows]
    kept = [r for r, ids in zip(kept, render(kept), strict=True) if len(ids) + MAX_NEW_TOKENS <= 2048]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return path, len(kept)


def direct(source: Path, url: str, concurrency: int, work: Path, name: str,
           sampler: vllm_probe.Sampler | None, limit: int | None = None, same_params: bool = False) -> dict[str, Any]:
    """One pass of the direct script (``bench.vllm_direct``, its own process): its figures."""
    report = work / f"{name}.json"
    args = [sys.executable, "-m", "bench.vllm_direct", str(source), url, str(concurrency),
            str(work / f"{name}.jsonl"), str(report), *(["--limit", str(limit)] if limit else []),
            *(["--same-params"] if same_params else [])]
    started = time.time()
    proc = subprocess.Popen(args, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"the direct script failed ({proc.returncode}); files in {work}")
    run = json.loads(report.read_text())
    stamps = run["stamps"]
    if len(stamps) != (limit or len(source.read_text().splitlines())):
        raise RuntimeError(f"the direct script wrote {len(stamps)} rows; files in {work}")
    st = vllm_probe.steady(stamps)
    return {"steady_rows_per_s": round(st["steady_rows_per_s"], 1),
            "first_row_s": round(min(stamps) - started, 2),
            "overall_rows_per_s": round(len(stamps) / (max(stamps) - started), 1),
            "latency_s": vllm_probe.percentiles(run["latencies"]),
            "cpu_ms_per_row": round(1000 * (usage.ru_utime + usage.ru_stime) / len(stamps), 2),
            **(_rounded(sampler.window(st["window_start"], st["window_end"])) if sampler else {})}


def pipeline(bootstrap: str, broker_pid: int, source: Path, url: str, concurrency: int, work: Path,
             prompts: int, sampler: vllm_probe.Sampler, profile: bool) -> dict[str, Any]:
    """The pipeline with one worker (topics of its own under ``work``'s name): its figures."""
    work.mkdir()
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", work.name]
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=work.name)
    ensure_topics(kafka, pipeline_topics(kafka, 6))
    out = work / "dataset"
    procs = {"worker": harness.spawn(["generate", "--sglang-url", url, "--concurrency", str(concurrency),
                                      *common], log=work / "worker.log"),
             "sink": harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                                   log=work / "sink.log")}
    spies: list[subprocess.Popen[bytes]] = []
    try:
        # A running deployment's consumers have joined their groups, and the worker's new
        # partitions have passed their --settle-seconds hold, before prompts arrive.
        _wait_for_line(work / "worker.log", "the group settled", procs["worker"])
        _wait_for_line(work / "sink.log", "assigned", procs["sink"])
        pids = {"broker": broker_pid, **{name: p.pid for name, p in procs.items()}}
        cpu_before = {name: harness.cpu_seconds(pid) for name, pid in pids.items()}
        started = time.time()
        producer = harness.spawn(["produce", str(source), "--tokenizer", str(TOKENIZER_DIR),
                                  "--partitions", "6", "--max-new-tokens",
                                  str(MAX_NEW_TOKENS), "--temperature", "0.6", "--top-p", "1.0",
                                  "--top-k", "-1", *common], log=work / "producer.log")
        if profile:
            spies = [vllm_probe.py_spy(pid, work / f"{name}.pyspy")
                     for name, pid in [*pids.items(), ("producer", producer.pid)] if name != "broker"]
        producer_cpu = None
        while harness.dataset_rows(out) < prompts:
            if producer.poll() is None:  # its last reading before it exits
                producer_cpu = _cpu_if_exiting(producer) or producer_cpu
            if any(p.poll() not in (None, 0) for p in [*procs.values(), producer]):
                raise RuntimeError(f"a pipeline process failed; logs in {work}")
            time.sleep(0.1)
        finished = time.time()
        cpu = {name: harness.cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        producer.wait(timeout=60)
    finally:
        for proc in procs.values():
            harness.stop(proc)
        for spy in spies:
            spy.wait(timeout=60)
    answered, written = _rows(out)
    if len(answered) != prompts:
        raise RuntimeError(f"{len(answered)} distinct rows for {prompts} prompts; logs in {work}")
    st, sink_st = vllm_probe.steady(list(answered.values())), vllm_probe.steady(list(written.values()))
    stages = vllm_probe.stage_times(bootstrap, kafka.generations_topic, written)
    stages["first_at"] = {k: round(v - started, 2) for k, v in stages["first_at"].items()}
    figures = {"steady_rows_per_s": round(st["steady_rows_per_s"], 1),
               "sink_steady_rows_per_s": round(sink_st["steady_rows_per_s"], 1),
               "first_row_s": round(min(written.values()) - started, 2),
               "first_answer_s": round(min(answered.values()) - started, 2),
               "overall_rows_per_s": round(prompts / (finished - started), 1),
               **_rounded(sampler.window(st["window_start"], st["window_end"])),
               "cpu_ms_per_row": {name: round(1000 * s / prompts, 2) for name, s in cpu.items()}
               | ({"producer": round(1000 * producer_cpu / prompts, 2)} if producer_cpu else {}),
               "stages": stages}
    if profile:  # (only its profile and stages are reported: py-spy's own CPU slows the rest)
        return {"stages": figures["stages"], "steady_rows_per_s": figures["steady_rows_per_s"],
                "profile": {name: vllm_probe.profile_summary(work / f"{name}.pyspy")
                            for name in ("worker", "sink", "producer")}}
    return figures


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until a stage's log holds ``text``."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {text!r} in {log} (exit code {proc.poll()})")
        time.sleep(0.1)


def _cpu_if_exiting(proc: subprocess.Popen[bytes]) -> float | None:
    """The producer's CPU seconds, read while it is still there to read (it exits once published)."""
    try:
        return harness.cpu_seconds(proc.pid)
    except (FileNotFoundError, ProcessLookupError):
        return None


def _rows(root: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Row id → the worker's answer time (the row's ``created_at``) and → its segment's manifest time."""
    answered: dict[str, float] = {}
    written: dict[str, float] = {}
    for event in read_manifest(root):
        for seg in event.get("added", ()):
            table = pq.read_table(root / seg["path"], columns=["id", "created_at"])
            for rid, at in zip(table["id"].to_pylist(), table["created_at"].to_pylist(), strict=True):
                answered[rid] = at.timestamp()
                written[rid] = event["at"] / 1000
    return answered, written


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()}


def passes(rounds: int) -> list[str]:
    """The order of the passes: each round a direct and a pipeline pass, the first side alternating (ABBA)."""
    return [side for r in range(rounds) for side in (("direct", "pipeline") if r % 2 == 0 else ("pipeline", "direct"))]


def ratios(sides: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Pipeline over direct, by the means of each side's passes, steady and overall; each round's too."""
    out: dict[str, Any] = {}
    names = {kind: [f"{kind}_{i}" for i in range(1, order.count(kind) + 1)] for kind in ("direct", "pipeline")}
    for figure in ("steady", "overall"):
        mean = {kind: statistics.fmean(sides[n][f"{figure}_rows_per_s"] for n in ns) for kind, ns in names.items()}
        out[f"{figure}_ratio"] = round(mean["pipeline"] / mean["direct"], 3)
        out[f"{figure}_means"] = {kind: round(v, 1) for kind, v in mean.items()}
        out[f"{figure}_round_ratios"] = [round(sides[p][f"{figure}_rows_per_s"] / sides[d][f"{figure}_rows_per_s"], 3)
                                         for d, p in zip(names["direct"], names["pipeline"], strict=True)]
    out["first_row_s"] = {kind: [sides[n]["first_row_s"] for n in ns] for kind, ns in names.items()}
    return out


def run(*, prompts: int, concurrency: int, profile: bool, pin: bool, contention: bool,
        plain_params: bool = False, rounds: int = 2) -> dict[str, Any]:
    """One side-by-side measurement on one vLLM server, passes interleaved; returns the figures."""
    engine_core = split_cores(pin)
    work = Path(tempfile.mkdtemp(prefix="eaglefeed-bench-"))
    source, prompts = write_prompts(work / "prompts.jsonl", prompts)
    same = not plain_params  # the direct script sends what the worker sends (the fair baseline)
    order = passes(rounds)
    sides: dict[str, Any] = {}
    with vllm(tiny_model(), work / "vllm.log", engine_core) as (url, session), \
            broker() as (bootstrap, broker_pid), vllm_probe.Sampler(url, session) as sampler:
        direct(source, url, concurrency, work, "warmup", None, limit=WARMUP, same_params=same)
        for kind in order:
            name = f"{kind}_{sum(1 for k in sides if k.startswith(kind)) + 1}"
            if kind == "direct":
                sides[name] = direct(source, url, concurrency, work, name, sampler, same_params=same)
            else:
                sides[name] = pipeline(bootstrap, broker_pid, source, url, concurrency, work / name, prompts,
                                       sampler, profile=False)
            print(f"{name}: steady {sides[name]['steady_rows_per_s']} rows/s, first row "
                  f"{sides[name]['first_row_s']} s", file=sys.stderr, flush=True)
        if contention:  # the direct script again, its core kept busy by a spinning process (see BENCHMARKS.md)
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                sides["direct_core_busy"] = direct(source, url, concurrency, work, "direct_core_busy", sampler,
                                                   same_params=same)
            finally:
                spinner.kill()
                spinner.wait()
        if profile:
            sides["pipeline_profiled"] = pipeline(bootstrap, broker_pid, source, url, concurrency,
                                                  work / "profiled", prompts, sampler, profile=True)
    shutil.rmtree(work)  # kept, with the logs, when a run fails
    return {"prompts": prompts, "concurrency": concurrency, "pinned": engine_core is not None,
            "direct_params": "plain" if plain_params else "worker's", "order": order,
            "load_average": os.getloadavg(), **sides, **ratios(sides, order)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64, help="in flight, pipeline and direct alike")
    parser.add_argument("--profile", action="store_true", help="py-spy the worker, sink and producer")
    parser.add_argument("--contention", action="store_true",
                        help="one more direct pass with a spinning process on the clients' core")
    parser.add_argument("--plain-params", action="store_true",
                        help="the direct script sends its own four sampling settings, not the worker's full set")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of one direct and one pipeline pass each, the first side alternating")
    parser.add_argument("--no-pin", action="store_true", help="let vLLM and the clients share every core")
    args = parser.parse_args()
    print(json.dumps(run(prompts=args.prompts, concurrency=args.concurrency, profile=args.profile,
                         pin=not args.no_pin, contention=args.contention, plain_params=args.plain_params,
                         rounds=args.rounds),
                     indent=2))


if __name__ == "__main__":
    main()
