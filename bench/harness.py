"""Shared pieces of the benchmarks: processes, the local broker, stand-in metrics, /proc readings."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from eaglefeed.core.config import cache_dir
from eaglefeed.devtools import launcher, localbroker
from eaglefeed.devtools.demo import SAMPLE_PROMPTS
from eaglefeed.devtools.launcher import StandinProcess
from eaglefeed.devtools.startup import free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")


def pin_cores() -> tuple[set[int], set[int]]:
    """Split the machine: the stand-ins (our GPU) get core 0, everything else the other cores.

    On a real deployment the GPU does not share CPU with the pipeline; pinning keeps the emulated
    server's timing from depending on how much CPU the client side uses, for baseline and
    pipeline alike. Call it first: children inherit the affinity of this process.
    """
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    server, rest = {cores[0]}, set(cores[1:])
    os.sched_setaffinity(0, rest)
    return server, rest


SERVER_CORES: set[int] | None = None


@contextmanager
def broker() -> Iterator[str]:
    """A fresh local Kafka broker for one benchmark; yields its bootstrap address."""
    with tempfile.TemporaryDirectory(prefix="eaglefeed-bench-") as tmp:
        status = localbroker.start(data_dir=Path(tmp), port=free_port(), cache_dir=cache_dir())
        try:
            yield status.bootstrap_servers or ""
        finally:
            localbroker.stop(Path(tmp))


spawn = launcher.spawn  # ``python -m eaglefeed ARGS`` in the background (the benchmarks import it from here)


def stop(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """SIGTERM a process and wait for it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def standins(count: int, *flags: str) -> Iterator[list[str]]:
    """Start ``count`` SGLang stand-ins; yields their base URLs."""
    started: list[StandinProcess] = []
    try:
        for _ in range(count):
            started.append(StandinProcess(flags=flags).start(wait=False))
            if SERVER_CORES and started[-1].pid is not None:
                os.sched_setaffinity(started[-1].pid, SERVER_CORES)
        for standin in started:
            standin.wait_healthy()
        yield [standin.url for standin in started]
    finally:
        for standin in started:
            standin.stop(timeout=60.0)


@dataclass(frozen=True)
class Busy:
    """A reading of the stand-in's busy-time counter."""

    running_seconds: float
    max_running: float
    at: float


def busy_reading(url: str) -> Busy:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return Busy(running_seconds=_metric(text, "eaglefeed_standin_running_request_seconds_total"),
                max_running=_metric(text, "eaglefeed_standin_max_running_requests"),
                at=time.monotonic())


def busy_fraction(before: list[Busy], after: list[Busy]) -> float:
    """Time-averaged running requests over the maximum, across servers."""
    used = sum(a.running_seconds - b.running_seconds for a, b in zip(before, after, strict=True))
    capacity = sum((a.at - b.at) * a.max_running for a, b in zip(before, after, strict=True))
    return used / capacity if capacity else 0.0


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, flags=re.M)
    if match is None:
        raise KeyError(name)
    return float(match.group(1))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size of a process (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def write_prompts(path: Path, count: int) -> Path:
    """``count`` distinct prompts made from the bundled samples (a variant tag on the last turn)."""
    rows = [json.loads(line) for line in SAMPLE_PROMPTS.read_text().splitlines()]
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(count):
            row = json.loads(json.dumps(rows[i % len(rows)]))
            row["id"] = f"bench-{i}"
            turns = row.get("messages") or row.get("conversations")
            last = max(j for j, t in enumerate(turns) if t.get("role", t.get("from")) in ("user", "human"))
            key = "content" if "messages" in row else "value"
            turns[last][key] = f"{turns[last][key]} (variant {i})"
            fh.write(json.dumps(row) + "\n")
    return path


def dataset_rows(root: Path) -> int:
    from eaglefeed.dataset.manifest import live_segments, read_manifest

    return sum(s["rows"] for s in live_segments(read_manifest(root)).values())
