"""``--concurrency auto`` end to end: real broker, real stand-ins, real ``eaglefeed generate`` processes.

Issue 25: each server's in-flight limit is found and followed at run time from what the server
reports, so a server is kept full without a growing queue, as servers restart with another
capacity or are shared by several workers. The limits come from the workers' Prometheus
``/metrics``, the load from the stand-in's; every run ends with every prompt generated exactly
once and no dead letter.

Each assertion would fail without the adaptation: a fixed ``--concurrency 8`` never fills 32
slots after the restart, a fixed setting large enough to fill them queues the rest of its window
on the server, and a worker that did not cut for a queue other workers share would keep the
start limits (2 × 16 against 12 slots).

A server joining a running worker is not tested: a worker's servers are its ``--sglang-url``
list, each of which must answer at start-up; one that leaves rotation and comes back is the
restart here.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.devtools.launcher import StandinProcess
from tests.conftest import free_port
from tests.integration.auto_support import (
    PARTITIONS,
    STANDIN_FLAGS,
    WORKER_FLAGS,
    Backlog,
    Sample,
    Sampler,
    median,
)
from tests.integration.worker_support import (
    dead_letters,
    duplicates,
    generations,
    spawn_worker,
    wait_for_members,
)
from tests.running import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
SMALL, LARGE, SHARED = 8, 32, 12  # the stand-ins' --max-running-requests


def _settled(capacity: int, *, window: float = 3.0, low: float = 1.0,
             high: float = 1.75) -> Callable[[list[Sample]], bool]:
    """A check: over the last ``window`` s the limits' sum has a median in [low, high] × capacity, and
    the server ran a median of at least 3/4 of its capacity (kept full) with a median of at most
    half of it + 2 waiting (no standing queue)."""
    def check(samples: list[Sample]) -> bool:
        if not samples or samples[-1].at - samples[0].at < window:
            return False
        recent = [s for s in samples if s.at >= samples[-1].at - window]
        totals = [s.total for s in recent]
        if any(t is None for t in totals) or any(s.running is None or s.waiting is None for s in recent):
            return False
        return (low * capacity <= median(totals) <= high * capacity
                and median([s.running for s in recent]) >= 0.75 * capacity
                and median([s.waiting for s in recent]) <= capacity / 2 + 2)
    return check


def _finish(kafka: KafkaConfig, backlog: Backlog, workers: dict[str, subprocess.Popen[bytes]],
            logs: Path) -> None:
    """Stop topping up, wait for the rest, stop the workers; every prompt once, no dead letter."""
    backlog.stop()
    wait_until(lambda: backlog.generated() >= len(backlog.expected), timeout=90,
               what="the rest of the backlog")
    for name, proc in workers.items():
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (logs / f"{name}.log").read_text()[-3000:]
    ids = [g["id"] for _r, g in generations(kafka)]
    assert set(ids) == backlog.expected
    assert duplicates(ids) == 0
    assert dead_letters(kafka) == []


def _spawn(kafka: KafkaConfig, url: str, logs: Path, names: tuple[str, ...],
           stack: ExitStack) -> tuple[dict[str, subprocess.Popen[bytes]], list[str]]:
    """Start workers ``names`` on ``url`` (``stack`` kills any left running); them, their metrics URLs."""
    procs, metrics = {}, []
    for name in names:
        port = free_port()
        proc = spawn_worker(kafka, url, logs / f"{name}.log", "--worker-id", name, "--metrics-port",
                            str(port), *WORKER_FLAGS)  # no --concurrency: auto is the default
        stack.callback(lambda p=proc: p.poll() is None and p.kill())
        procs[name] = proc
        metrics.append(f"http://127.0.0.1:{port}")
    # every member first (--settle-seconds 0): no rebalance moves a prompt already in flight
    wait_for_members(kafka, len(names))
    return procs, metrics


def _standin(logs: Path, stack: ExitStack, slots: int) -> StandinProcess:
    standin = StandinProcess()
    stack.callback(standin.stop)
    _restart(standin, logs, slots)
    return standin


def _restart(standin: StandinProcess, logs: Path, slots: int) -> None:
    """Start the stopped stand-in on its port with ``slots`` running requests (a log file per start)."""
    starts = len(list(logs.glob(f"standin-{standin.port}-*.log")))
    standin.start(flags=(*STANDIN_FLAGS, "--max-running-requests", str(slots)),
                  log=logs / f"standin-{standin.port}-{starts + 1}.log")


def test_a_server_restarted_with_other_slots_gets_a_limit_that_follows_it(kafka_config, tmp_path):
    with ExitStack() as stack:
        standin = _standin(tmp_path, stack, SMALL)
        ensure_topics(kafka_config, pipeline_topics(kafka_config, PARTITIONS))
        workers, metrics = _spawn(kafka_config, standin.url, tmp_path, ("auto-a",), stack)
        backlog = stack.enter_context(closing(Backlog(kafka_config, low=160, chunk=80)))
        sampler = stack.enter_context(closing(Sampler(server=standin.url, worker_metrics=metrics)))

        # from the start limit (16) down to about the 8 slots, the 8 kept running
        small_at = sampler.wait_for(_settled(SMALL), start=0, timeout=60, what=f"a limit near {SMALL}")

        standin.stop()
        _restart(standin, tmp_path, LARGE)
        restarted = sampler.now()
        large_at = sampler.wait_for(_settled(LARGE, window=2.0, low=0.9, high=1.6), start=restarted,
                                    timeout=40, what=f"the limit to follow the restart to {LARGE}")
        sampler.wait_until(large_at + 3)
        phase = [s for s in sampler.since(restarted) if s.waiting is not None and s.total is not None]
        # the queue the limit leaves: at most the slow start's last doubling past 32 slots, never
        # what the backlog (160+ prompts; the worker fetches twice its slots) would put there
        assert max(s.waiting or 0 for s in phase) <= 1.25 * LARGE, sampler.timeline()
        assert max(s.total or 0 for s in phase) <= 2.5 * LARGE, sampler.timeline()

        standin.stop()  # and back to 8 slots: down again
        _restart(standin, tmp_path, SMALL)
        again = sampler.now()
        back_at = sampler.wait_for(_settled(SMALL), start=again, timeout=40,
                                   what=f"the limit back near {SMALL}")
        most_waiting, top = max(s.waiting or 0 for s in phase), max(s.total or 0 for s in phase)
        print(f"\nlimits: near {SMALL} at {small_at:.1f} s; restarted with {LARGE} slots at "
              f"{restarted:.1f} s, followed at {large_at:.1f} s (+{large_at - restarted:.1f} s), waiting "
              f"at most {most_waiting:.0f}, limit at most {top:.0f}; back to {SMALL} at {again:.1f} s, "
              f"followed at {back_at:.1f} s (+{back_at - again:.1f} s)")
        print(sampler.timeline())
        _finish(kafka_config, backlog, workers, tmp_path)


def test_two_workers_sharing_a_server_split_its_slots_without_a_queue(kafka_config, tmp_path):
    with ExitStack() as stack:
        standin = _standin(tmp_path, stack, SHARED)
        ensure_topics(kafka_config, pipeline_topics(kafka_config, PARTITIONS))
        workers, metrics = _spawn(kafka_config, standin.url, tmp_path, ("auto-a", "auto-b"), stack)
        backlog = stack.enter_context(closing(Backlog(kafka_config, low=200, chunk=80)))
        sampler = stack.enter_context(closing(Sampler(server=standin.url, worker_metrics=metrics)))

        # both start at 16 (32 in all, 20 waiting): together they must come down to the 12 slots
        settled = sampler.wait_for(_settled(SHARED, low=0.75, high=1.75), start=0, timeout=60,
                                   what=f"the two limits to share {SHARED} slots")
        sampler.wait_until(settled + 8)
        steady = [s for s in sampler.since(settled) if s.total is not None and s.waiting is not None]
        totals = [s.total or 0 for s in steady]
        most_waiting = max(s.waiting or 0 for s in steady)
        # kept full, sum of the limits about the slots, the queue bounded (the backlog is 200+)
        assert 0.75 * SHARED <= median(totals) <= 1.75 * SHARED, sampler.timeline()
        assert max(totals) <= 2 * SHARED, sampler.timeline()
        assert median([s.running for s in steady]) >= 0.75 * SHARED, sampler.timeline()
        assert most_waiting <= SHARED, sampler.timeline()
        print(f"\nlimits: shared at {settled:.1f} s; then sums {min(totals):.0f}-{max(totals):.0f} "
              f"(median {median(totals):.0f}), waiting at most {most_waiting:.0f}")
        print(sampler.timeline())
        _finish(kafka_config, backlog, workers, tmp_path)
