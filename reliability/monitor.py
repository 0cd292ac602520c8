"""Watch a scenario from outside: each group's committed offsets and lag, and every process's memory.

Recovery after a fault is read from these snapshots: the time from the fault's end (the process
restarted, the broker back) until the hit stage has committed everything that was in its input
topic when the fault struck, on every partition: the whole stage is moving again, not only its
healthy part. (For the producer: until the prompts topic grows again.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.lag import LagProbe, ProbeSession
from reliability.procs import rss_mb

STAGE_GROUPS = {"worker": ("generate",), "sink": ("sink",), "converse": ("converse",),
                "broker": ("generate", "sink")}


@dataclass(frozen=True)
class Snapshot:
    """One reading: per stage, partition → (committed offset, end offset); the prompts topic's end."""

    t: float
    offsets: dict[str, dict[int, tuple[int, int]]]
    prompts_end: int


@dataclass
class Fault:
    """A fault the scenario caused: which stage, when it began and ended, and its recovery time."""

    stage: str  # producer, worker, sink, broker or sglang
    target: str
    at: float
    ended: float
    recovery: float | None = None  # set directly for faults the snapshots cannot see (sglang)
    since: float | None = None  # a pause: recovery from here (its start), of what the topic held at ``ended``
    resume: dict[str, float | None] = field(default_factory=dict)  # per stage, cluster faults only


@dataclass
class Memory:
    """RSS samples (seconds since start, MB) of one process; a restart starts a new series."""

    series: list[list[tuple[float, float]]] = field(default_factory=list)
    pid: int | None = None


class Monitor:
    """Sample offsets every ``interval`` seconds and memory every ``rss_interval`` in a daemon thread.

    Args:
        kafka: broker and topics of the scenario.
        groups: stage (``generate``, ``sink``) → (consumer group, topic it reads).
        pids: returns process name → pid (None when not running) at each memory sample.
    """

    def __init__(self, *, kafka: KafkaConfig, groups: dict[str, tuple[str, str]],
                 pids: Callable[[], dict[str, int | None]], interval: float = 0.5,
                 rss_interval: float = 2.0) -> None:
        self.kafka = kafka
        self.groups = groups
        self.pids = pids
        self.interval = interval
        self.rss_interval = rss_interval
        self.snapshots: list[Snapshot] = []
        self.memory: dict[str, Memory] = {}
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reliability-monitor", daemon=True)

    def start(self) -> Monitor:
        """Start sampling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=60)

    def recovery(self, fault: Fault) -> float | None:
        """Seconds from the end of ``fault`` until its stage caught up (``inf``: never; None: unknown)."""
        if fault.recovery is not None or fault.stage == "sglang":
            return fault.recovery
        start = fault.ended if fault.since is None else fault.since
        before = [s for s in self.snapshots if s.t <= (fault.at if fault.since is None else fault.ended)]
        after = [s for s in self.snapshots if s.t >= start]
        if not before or not after:
            return None
        if fault.stage == "producer":
            grown = next((s for s in after if s.prompts_end > after[0].prompts_end), None)
            return None if grown is None else grown.t - start
        targets = [(stage, p, end) for stage in STAGE_GROUPS[fault.stage]
                   for p, (_committed, end) in before[-1].offsets.get(stage, {}).items()]
        for snap in after:
            if all(snap.offsets.get(stage, {}).get(p, (-1, 0))[0] >= end for stage, p, end in targets):
                return snap.t - start
        return float("inf")

    def _run(self) -> None:
        session = ProbeSession(kafka=self.kafka)  # the broker may be down on purpose: no reading then
        last_rss = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_rss >= self.rss_interval:
                last_rss = now
                self._sample_memory(now)
            snapshot = session.read(self._snapshot)
            if snapshot is not None:
                self.snapshots.append(snapshot)
            self._stop.wait(self.interval)
        session.close()

    def _snapshot(self, probe: LagProbe) -> Snapshot:
        offsets = {stage: {part.partition: (part.committed, part.end) for part in probe.measure(group, topic)}
                   for stage, (group, topic) in self.groups.items()}
        prompts_end = sum(probe.end_offsets(self.kafka.prompts_topic).values())
        return Snapshot(t=time.monotonic(), offsets=offsets, prompts_end=prompts_end)

    def _sample_memory(self, now: float) -> None:
        for name, pid in self.pids().items():
            mem = self.memory.setdefault(name, Memory())
            value = rss_mb(pid)
            if value is None:
                continue
            if pid != mem.pid:
                mem.series.append([])
                mem.pid = pid
            mem.series[-1].append((now - self.started, value))
