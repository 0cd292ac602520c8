"""Readings for the real-vLLM benchmark: vLLM's queue and each core's use over time, steady-state rates,
per-stage times of the pipeline's rows, and py-spy profiles summed by function.

Used by ``bench/vllm_pipeline_vs_direct.py``; every reading is taken the same way for the direct script
and for the pipeline, so the two can be compared window by window.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.harness import CLK_TCK

_METRIC = re.compile(r"^(vllm:[a-z0-9_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", re.M)
_COUNTERS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total",
             "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total",
             "vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds_count",
             "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count",
             "vllm:request_queue_time_seconds_sum")


@dataclass
class Sample:
    """One reading: wall time, vLLM's metrics, /proc/stat's per-core jiffies, vLLM's processes' CPU."""

    at: float
    running: float
    waiting: float
    counters: dict[str, float]  # _COUNTERS, summed over their labels
    cores: dict[str, tuple[int, int]]  # cpuN → (busy jiffies, total jiffies), cumulative
    engine_cpu: dict[str, float]  # ProcessCpu totals: vLLM's processes by name, the rest by core


@dataclass
class Sampler:
    """Read vLLM's ``/metrics`` gauges and the cores' use every ``every`` seconds on a thread."""

    url: str
    session: int | None = None  # vLLM's session id (its server's pid): its processes' CPU is read too
    every: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="vllm-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        cpu = ProcessCpu(self.session)
        with httpx.Client(timeout=5) as http:
            while not self._stop.is_set():
                try:
                    text = http.get(f"{self.url}/metrics").text
                except httpx.HTTPError:
                    text = ""
                metrics: dict[str, float] = defaultdict(float)
                for name, value in _METRIC.findall(text):
                    metrics[name] += float(value)
                self.samples.append(Sample(at=time.time(), running=metrics.get("vllm:num_requests_running", -1),
                                           waiting=metrics.get("vllm:num_requests_waiting", -1),
                                           counters={k: metrics.get(k, 0.0) for k in _COUNTERS},
                                           cores=core_jiffies(), engine_cpu=cpu.read()))
                self._stop.wait(self.every)

    def window(self, start: float, end: float) -> dict[str, float]:
        """Means over [start, end] (wall seconds): vLLM's running and waiting requests, each core's busy share."""
        inside = [s for s in self.samples if start <= s.at <= end]
        if len(inside) < 2:
            return {}
        out = {"vllm_running_mean": statistics.fmean(s.running for s in inside),
               "vllm_waiting_mean": statistics.fmean(s.waiting for s in inside),
               "vllm_running_min": min(s.running for s in inside), "samples": len(inside)}
        first, last = inside[0].cores, inside[-1].cores
        for core in sorted(first):
            busy, total = (last[core][i] - first[core][i] for i in (0, 1))
            out[f"{core}_busy"] = busy / total if total else 0.0
        a, b = inside[0], inside[-1]
        wall = b.at - a.at
        delta = {k: b.counters[k] - a.counters[k] for k in _COUNTERS}
        out["vllm_generation_tokens_per_s"] = delta["vllm:generation_tokens_total"] / wall
        done = delta["vllm:e2e_request_latency_seconds_count"]
        out["vllm_requests_per_s"] = done / wall
        out["vllm_e2e_latency_mean_s"] = delta["vllm:e2e_request_latency_seconds_sum"] / done if done else 0.0
        out["vllm_queue_time_mean_s"] = delta["vllm:request_queue_time_seconds_sum"] / done if done else 0.0
        steps = delta["vllm:inter_token_latency_seconds_count"]
        out["vllm_inter_token_mean_s"] = delta["vllm:inter_token_latency_seconds_sum"] / steps if steps else 0.0
        queries = delta["vllm:prefix_cache_queries_total"]
        out["vllm_prefix_hit_share"] = delta["vllm:prefix_cache_hits_total"] / queries if queries else 0.0
        out["vllm_preemptions"] = delta["vllm:num_preemptions_total"]
        shares = {name: (b.engine_cpu[name] - a.engine_cpu.get(name, 0.0)) / wall for name in b.engine_cpu}
        for name, share in shares.items():  # each vLLM process's share of one core over the window (and the rest's)
            if not name.startswith("by_comm:"):
                out[f"cpu_share_{name}"] = share
        top = sorted(((v, k[8:]) for k, v in shares.items() if k.startswith("by_comm:") and v >= 0.005), reverse=True)
        out["top_other"] = {k: round(v, 3) for v, k in top[:8]}  # type: ignore[assignment]
        return out


def core_jiffies() -> dict[str, tuple[int, int]]:
    """Cumulative (busy, total) jiffies of each core from /proc/stat (idle and iowait are not busy)."""
    cores = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if re.fullmatch(r"cpu\d+", name):
            values = [int(v) for v in fields[:8]]
            cores[name] = (sum(values) - values[3] - values[4], sum(values))
    return cores


class ProcessCpu:
    """Running totals of CPU seconds: vLLM's processes by name (``session``: its server's session id),
    everything else on the machine by the core it ran on (``other_cpuN``, by where each process was at
    each reading). Every process of this benchmark is pinned to the clients' core, so what else runs
    on vLLM's core shows as its ``other_``.
    """

    def __init__(self, session: int | None) -> None:
        self.session = session
        self._last: dict[str, float] = {}  # pid → CPU seconds at the last reading
        self.totals: dict[str, float] = defaultdict(float)

    def read(self) -> dict[str, float]:
        """Add what each process used since the last reading; return a copy of the totals."""
        seen: dict[str, float] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                head, _, rest = stat.read_text().rpartition(") ")
            except OSError:
                continue  # gone meanwhile
            fields = rest.split()
            pid = stat.parent.name
            seen[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
            used = seen[pid] - self._last.get(pid, seen[pid])  # a process new since the last reading: 0
            if self.session is not None and int(fields[3]) == self.session:  # field 6: the session id
                self.totals[head.partition(" (")[2]] += used
            else:
                self.totals[f"other_cpu{fields[36]}"] += used  # field 39: the processor it last ran on
                self.totals[f"by_comm:cpu{fields[36]}:{head.partition(' (')[2]}"] += used
        self._last = seen
        return dict(self.totals)


def steady(stamps: list[float]) -> dict[str, float]:
    """Rows per second between the 10 % and the 90 % row (by completion time), and that window."""
    stamps = sorted(stamps)
    lo, hi = int(0.1 * len(stamps)), int(0.9 * len(stamps)) - 1
    span = stamps[hi] - stamps[lo]
    return {"steady_rows_per_s": (hi - lo) / span if span > 0 else 0.0,
            "window_start": stamps[lo], "window_end": stamps[hi]}


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p90 of ``values`` (in the values' unit), rounded for the report."""
    if not values:
        return {}
    ordered = sorted(values)
    return {"p50": round(ordered[len(ordered) // 2], 4), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4)}


def stage_times(bootstrap: str, topic: str, written: dict[str, float]) -> dict[str, Any]:
    """Per-stage times of every generation in ``topic``, from the stamps each stage leaves.

    produced (the prompt's ``created_at``) → sent (the row's ``created_at`` less its
    ``latency_seconds``) → answered (``created_at``, set as the record is built from vLLM's
    answer) → published (the Kafka timestamp: the worker's producer stamps it in ``send()``) →
    written (``written``: the manifest time of the segment that holds the row, by row id).
    Also ``first_at``: the wall time of the first prompt produced, answered and published.
    """
    from kafka import KafkaConsumer

    from eaglefeed.schemas import GENERATION

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000, group_id=None)
    stages: dict[str, list[float]] = defaultdict(list)
    firsts: dict[str, float] = {}
    try:
        for msg in consumer:
            rec = GENERATION.decode(msg.value)
            firsts["produced"] = min(firsts.get("produced", 1e18), rec["prompt_created_at"] / 1000)
            firsts["answered"] = min(firsts.get("answered", 1e18), rec["created_at"] / 1000)
            firsts["published"] = min(firsts.get("published", 1e18), msg.timestamp / 1000)
            answered = rec["created_at"] / 1000
            sent = answered - rec["latency_seconds"]
            stages["produced_to_sent_s"].append(sent - rec["prompt_created_at"] / 1000)
            stages["sent_to_answered_s"].append(rec["latency_seconds"])
            stages["answered_to_published_s"].append(msg.timestamp / 1000 - answered)
            if rec["id"] in written:
                stages["published_to_written_s"].append(written[rec["id"]] - msg.timestamp / 1000)
    finally:
        consumer.close()
    return {"first_at": firsts, **{name: percentiles(values) for name, values in stages.items()}}


def py_spy(pid: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes]:
    """Sample ``pid`` with py-spy (raw collapsed stacks, per thread, idle excluded) until it exits."""
    return subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                             "--threads", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def profile_summary(raw: Path, rate: int = 100, top: int = 14) -> dict[str, Any]:
    """A py-spy raw profile summed up: active seconds per thread, and the functions the time goes to.

    ``inclusive`` counts each function once per sample it is on the stack of (its callees included);
    ``self`` counts the innermost frame only. Only active samples are in the file (idle excluded), so
    seconds = samples / rate is CPU-bound time (GIL waits included).
    """
    threads: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    if not raw.exists():
        return {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        threads[re.sub(r" ?\(?0x[0-9a-f]+\)?|\"", "", frames[0]).strip()] += int(count)
        names = [_short(f) for f in frames[1:]]
        for name in set(names):
            inclusive[name] += int(count)
        if names:
            own[names[-1]] += int(count)
    return {"active_seconds_by_thread": {t: round(n / rate, 2) for t, n in threads.most_common(8)},
            "inclusive_seconds": {f: round(n / rate, 2) for f, n in inclusive.most_common(top)},
            "self_seconds": {f: round(n / rate, 2) for f, n in own.most_common(top)}}


def _short(frame: str) -> str:
    """``func (pkg/mod.py:12)`` → ``func (mod.py)``: one name per function, not per line."""
    match = re.match(r"(.*?) \((?:.*/)?([^/:]+)(?::\d+)?\)$", frame.strip())
    return f"{match.group(1)} ({match.group(2)})" if match else frame.strip()
