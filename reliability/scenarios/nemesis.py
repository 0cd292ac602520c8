"""The nemesis: many faults, overlapping, on a three-node cluster while prompts keep arriving.

The whole pipeline runs on a cluster of its own (``eaglefeed broker start --nodes 3``): a
producer following a file of prompts and a second one (``--history rerender``) following a file
of three-turn conversations, two generate workers, the converse stage, two sinks and a stand-in.
Both files grow at a steady rate. For ``D`` minutes (10; ``--quick``: 2) a nemesis strikes every
15–25 s (a seeded RNG: the schedule is printed and repeats) with one of:

- ``kill``: SIGKILL of a worker, sink, converse or producer, started again 0.2–2 s later, as a
  supervisor would;
- ``pause``: SIGSTOP of one of them for 1.7x its session timeout (the producer, in no group:
  10 s), then SIGCONT;
- ``node-kill``: SIGKILL of a broker node, started again 30 s later on its storage;
- ``node-pause``: SIGSTOP of a broker node for 20 s, then SIGCONT;
- ``standin``: SIGKILL of the stand-in, started again 1–5 s later.

Faults overlap (a node is down 30 s and more, the next strike comes sooner); only one broker node
is hit at a time (two of three down is a cluster without a quorum and without
``min.insync.replicas``: an outage, not a fault to ride out), and a process already down or
paused is not hit again. A process that exits on its own (the stall watchdog's last step) is
started again, as a supervisor would, and noted.

At the end the usual books (every prompt, every conversation turn, exactly once as a row or a
dead letter), and per stage the longest time one of its partitions stood still with work waiting
*after every fault that struck before it moved had healed* (a stall during a fault is the fault's;
what counts is how long the stage stays stuck once nothing is wrong any more), read from the
offsets every 0.25 s (:class:`reliability.resume.ResumeWatch`). RSS of every process is sampled
every 2 s: the first quarter of its longest life against the last.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from eaglefeed.devtools.startup import wait_healthy
from reliability.broker import Broker
from reliability.cluster import Cluster
from reliability.monitor import Fault, Memory
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.resume import ResumeWatch
from reliability.scenarios.cluster import end_feed, on_cluster, warm_up
from reliability.scenarios.common import Settings

log = logging.getLogger(__name__)

KINDS = ("kill", "pause", "node-kill", "node-pause", "standin")
WEIGHTS = (4, 2, 1, 1, 1)  # process faults are the commonest; each kind still comes several times
SESSION = {"worker": 6.0, "sink": 6.0, "converse": 20.0, "producer": 6.0}  # seconds, as started here
NODE_DOWN = 30.0  # a killed node is started again this long after the SIGKILL
NODE_PAUSE = 20.0
STALL_SECONDS = 20.0  # --stall-seconds of the stages: the watchdog's steps come at 20, 40 and 60 s
STALL_LIMIT = 60.0  # the bar: no stage stands still longer than this after the faults healed
RSS_LIMIT = 0.15  # last quarter's median RSS within 15 % of the first quarter's
WARM_UP = 30.0  # seconds of a process's life its RSS is not judged by (start-up)
JUDGED_MINUTES = 5.0  # memory is judged in runs at least this long (the 10-minute one, not --quick)
WATCHDOG_LINES = {"seek": "seeking to the position to reset its fetch state",
                  "rejoin": "leaving the group and joining again",
                  "exit": "through a seek and a re-join: exiting"}


@dataclass
class Strike:
    """One fault of the nemesis: what, on whom, when it struck and when it healed (None: not yet)."""

    kind: str
    target: str
    at: float
    healed: float | None = None
    fault: Fault | None = None


@dataclass
class Nemesis:
    """The schedule and its bookkeeping: strikes made, heals pending, the node currently hit."""

    pipe: Pipeline
    nodes: Cluster
    minutes: float
    seed: int
    kinds: tuple[str, ...] = KINDS  # the kinds it strikes with (``--nemesis-kinds``)
    strikes: list[Strike] = field(default_factory=list)
    pending: list[tuple[float, Strike]] = field(default_factory=list)  # (due, strike) heals to do
    busy: set[str] = field(default_factory=set)  # targets down or paused now
    threads: list[threading.Thread] = field(default_factory=list)
    stalls: dict[str, tuple[float, str]] = field(default_factory=dict)  # stage → (stall, after what)

    def run(self) -> None:
        """Strike every 15–25 s for ``minutes``, heal what is due, then heal everything still hit."""
        rng = self.pipe.rng
        started = time.monotonic()
        log.info("nemesis: seed %d, striking for %g minutes", self.seed, self.minutes)
        end = started + 60.0 * self.minutes
        next_strike = started + rng.uniform(5.0, 10.0)
        while time.monotonic() < end:
            self.pipe.wait(0.2)
            self._heal_due()
            if time.monotonic() >= next_strike:
                allowed = [(k, w) for k, w in zip(KINDS, WEIGHTS, strict=True) if k in self.kinds]
                self._strike(rng.choices([k for k, _ in allowed], [w for _, w in allowed])[0])
                next_strike = time.monotonic() + rng.uniform(15.0, 25.0)
        while self.pending or any(t.is_alive() for t in self.threads):  # the last faults heal when due
            self.pipe.wait(0.2)
            self._heal_due()
        for thread in self.threads:
            thread.join()

    # --- striking -----------------------------------------------------------------------
    def _strike(self, kind: str) -> None:
        rng = self.pipe.rng
        procs = [n for n in self.pipe.procs if not n.startswith("sglang") and n not in self.busy]
        node_hit = any(t.startswith("node-") for t in self.busy)
        if kind in ("node-kill", "node-pause") and node_hit:
            kind = "kill"  # one node at a time: two of three down is an outage, not a fault
        if kind == "standin" and "sglang-0" in self.busy:
            kind = "kill"
        if kind not in self.kinds:
            return  # (its stand-in kind was left out: this strike is skipped)
        now = time.monotonic()
        if kind in ("kill", "pause"):
            if not procs:
                return
            name = rng.choice(sorted(procs))
            strike = Strike(kind, name, now)
            proc = self.pipe.procs[name]
            if kind == "kill":
                proc.kill()
                due = now + rng.uniform(0.2, 2.0)
            else:
                proc.pause()
                due = now + (10.0 if name.startswith("producer") else 1.7 * SESSION[_stage(name)])
        elif kind == "standin":
            strike = Strike(kind, "sglang-0", now)
            self.pipe.procs["sglang-0"].kill()
            due = now + rng.uniform(1.0, 5.0)
        else:
            node = rng.choice(sorted(self.nodes.node_pids()))
            strike = Strike(kind, f"node-{node}", now)
            if kind == "node-kill":
                self.nodes.kill_node(node)
                due = now + NODE_DOWN
            else:
                pid = self.nodes.node_pids()[node]
                if pid is None:
                    return
                os.kill(pid, signal.SIGSTOP)
                due = now + NODE_PAUSE
        self.busy.add(strike.target)
        self.strikes.append(strike)
        self.pending.append((due, strike))
        log.info("nemesis: +%.0fs %s %s (heals in %.1fs)", now - self.pipe.monitor.started, kind,
                 strike.target, due - now)

    # --- healing ------------------------------------------------------------------------
    def _heal_due(self) -> None:
        now = time.monotonic()
        due = [(t, s) for t, s in self.pending if t <= now]
        self.pending = [(t, s) for t, s in self.pending if t > now]
        for _t, strike in due:
            self._heal(strike)

    def _heal(self, strike: Strike) -> None:
        target = strike.target
        if strike.kind == "kill":
            self.pipe.procs[target].start()
            self._healed(strike, _stage(target))
        elif strike.kind == "pause":
            self.pipe.procs[target].resume()
            self._healed(strike, _stage(target), paused=True)
        elif strike.kind == "standin":
            proc = self.pipe.procs[target].start()
            # Healed once it answers again (seconds of start-up); the loop keeps feeding meanwhile.
            self._in_background(strike, "sglang", lambda: wait_healthy(
                self.pipe.standin_urls[0], process=proc.popen, log=proc.log))
        elif strike.kind == "node-kill":
            node = int(target.split("-")[1])
            self._in_background(strike, "broker", lambda: self.nodes.start_node(node))
        else:
            pid = self.nodes.node_pids()[int(target.split("-")[1])]
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
            self._healed(strike, "broker")

    def _in_background(self, strike: Strike, stage: str, action: Callable[[], object]) -> None:
        """Heal with ``action`` (seconds: a node's start-up) on a thread while the scenario keeps feeding."""
        def run() -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
                self.pipe.errors.append(f"healing {strike.kind} {strike.target} failed: {exc!r}")
            self._healed(strike, stage)

        thread = threading.Thread(target=run, name=f"nemesis-heal-{strike.target}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _healed(self, strike: Strike, stage: str, *, paused: bool = False) -> None:
        strike.healed = time.monotonic()
        strike.fault = Fault(stage=stage, target=strike.target, at=strike.at, ended=strike.healed,
                             since=strike.at if paused else None)
        if stage == "sglang":  # the monitor cannot see a server's recovery: healthy again is it
            strike.fault.recovery = 0.0
        self.pipe.faults.append(strike.fault)
        self.busy.discard(strike.target)
        log.info("nemesis: %s %s healed after %.1fs", strike.kind, strike.target, strike.healed - strike.at)


def _stage(name: str) -> str:
    """The stage of process ``name`` (``worker-1`` → worker, ``producer-conv`` → producer)."""
    return name.split("-")[0]


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """The nemesis scenario: ``D`` minutes of overlapping faults (10; quick: 2), then the books."""
    quick = settings.quick
    minutes = settings.nemesis_minutes or (2.0 if quick else 10.0)
    seed = settings.nemesis_seed
    kinds = settings.nemesis_kinds or KINDS
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown nemesis kinds {unknown}; choose from {', '.join(KINDS)}")
    rate = 8 if quick else 15  # prompts a second; a tenth as many conversations (three turns each)
    feed = 600.0 + 60.0 * minutes  # open until the nemesis ends (start-up takes what it takes)
    flags = ("--stall-seconds", str(STALL_SECONDS))
    worker_flags = (*flags, "--exactly-once") if settings.nemesis_exactly_once else flags
    shape = Shape(prompts=round(rate * feed), conversations=round(rate * feed / 10), feed_seconds=feed,
                  timeout=feed + 600.0, seed=seed, sinks=2, supervised=True, worker_flags=worker_flags,
                  converse_flags=flags, sink_flags=("--session-timeout", str(SESSION["sink"]), *flags))
    notes: list[str] = [f"nemesis seed {seed}, {minutes:g} minutes, a strike every 15-25 s"
                        + ("" if kinds == KINDS else f" of {', '.join(kinds)} only")
                        + (", exactly-once workers" if settings.nemesis_exactly_once else "")]
    box: dict[str, Nemesis] = {}

    def act(pipe: Pipeline, nodes: Cluster, watcher: ResumeWatch) -> None:
        warm_up(pipe)
        nemesis = box["n"] = Nemesis(pipe=pipe, nodes=nodes, minutes=minutes, seed=seed, kinds=kinds)
        base = pipe._pids  # noqa: SLF001 - the broker nodes' memory too, shown beside the stages
        pipe.monitor.pids = lambda: {**base(), **{f"node-{i}": p for i, p in nodes.node_pids().items()}}
        per_second = pipe.shape.conversations / pipe.shape.feed_seconds
        end_feed(pipe, time.monotonic() + 60.0 * minutes)
        # (end_feed keeps the prompts' rate; the conversations keep theirs too)
        pipe.shape = replace(pipe.shape, conversations=round(per_second * pipe.shape.feed_seconds))
        # Settled within 5 minutes of the feed's end, or it is a stage that stopped.
        pipe.shape = replace(pipe.shape, timeout=pipe.shape.feed_seconds + 300.0)
        nemesis.run()
        pipe.wait(20.0)  # the stages' last recoveries show in the readings
        notes.extend(_stall_notes(pipe, watcher, nemesis))

    result = on_cluster("nemesis", shape, broker, root, act, notes)
    nemesis = box.get("n")
    if nemesis is not None:
        _judge(result, nemesis, root / "nemesis")
    return result


# --- the verdicts ---------------------------------------------------------------------------
def hits(strike: Strike, stage: str) -> bool:
    """Whether ``strike`` can hold ``stage`` back.

    A fault of its own processes (a member gone is a rebalance of the whole group), of a broker
    node, or (the workers) of the stand-in. A worker killed does not stop the sink from writing
    the generations that wait.
    """
    if strike.kind.startswith("node-"):
        return True
    if strike.kind == "standin":
        return stage == "worker"
    return _stage(strike.target) == stage


def after_heal_stalls(watcher: ResumeWatch, strikes: list[Strike], start: float,
                      end: float) -> dict[str, tuple[float, str]]:
    """Stage → (longest stall after the faults healed, the strike it followed).

    A stall of a partition from ``a`` to ``b`` counts from the moment the last fault that struck
    before ``b`` and can hold the stage back (:func:`hits`) healed (or from ``a``, if later):
    ``b - max(a, healed)``; none if that fault was still going on when the partition moved.
    """
    out: dict[str, tuple[float, str]] = {}
    for stage in watcher.stages:
        best = (0.0, "-")
        for _partition, a, b in watcher.stalls(stage, start, end):
            before = [s for s in strikes if s.at < b and hits(s, stage)]
            healed = max((s.healed if s.healed is not None else float("inf") for s in before), default=a)
            length = b - max(a, healed)
            if length > best[0]:
                last = max(before, key=lambda s: s.healed or float("inf"), default=None)
                shown = (f"after {last.kind} {last.target} at +{last.at - start:.0f}s" if last is not None
                         else "before any fault")
                best = (length, shown)
        out[stage] = best
    return out


def _stall_notes(pipe: Pipeline, watcher: ResumeWatch, nemesis: Nemesis) -> list[str]:
    start = pipe.monitor.started
    feed_end = start + pipe.shape.feed_seconds
    stalls = after_heal_stalls(watcher, nemesis.strikes, nemesis.strikes[0].at if nemesis.strikes else start,
                               time.monotonic())
    # The producer has nothing to publish once the feed ended: its stalls count until then.
    stalls["producer"] = after_heal_stalls(watcher, nemesis.strikes, nemesis.strikes[0].at
                                           if nemesis.strikes else start, feed_end)["producer"]
    nemesis.stalls = stalls
    lines = ["longest stall after the faults healed (a partition with work waiting standing still): "
             + ", ".join(f"{stage} {t:.1f} s ({what})" for stage, (t, what) in stalls.items())]
    for stage, (t, _what) in stalls.items():
        if t > STALL_LIMIT:
            pipe.errors.append(f"{stage} stood still {t:.1f} s after the faults healed "
                               f"(limit {STALL_LIMIT:.0f} s)")
    return lines


def rss_quarters(memory: dict[str, Memory]) -> dict[str, tuple[float, float, int, float]]:
    """Process → (median RSS MB of its first quarter, of its last, lives, seconds) of its longest life.

    The life's first :data:`WARM_UP` seconds are left out: imports, the tokenizer and the first
    buffers are its size, not a leak (a worker grows from 75 to 90 MB in its first 20 s).
    """
    out = {}
    for name, mem in sorted(memory.items()):
        longest = max(mem.series, key=len, default=[])
        series = [(t, mb) for t, mb in longest if longest and t - longest[0][0] >= WARM_UP]
        if len(series) < 8:
            continue
        values = [mb for _t, mb in series]
        n = len(values)
        first, last = statistics.median(values[: n // 4]), statistics.median(values[3 * n // 4:])
        out[name] = (first, last, len(mem.series), series[-1][0] - series[0][0])
    return out


def _judge(result: Result, nemesis: Nemesis, folder: Path) -> None:
    """Add the schedule, the faults by kind, the watchdog's steps, exits and memory to ``result``."""
    pipe = nemesis.pipe
    start = nemesis.strikes[0].at if nemesis.strikes else pipe.monitor.started
    kinds = {k: sum(s.kind == k for s in nemesis.strikes) for k in KINDS}
    result.notes.append("faults by kind: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
    result.notes.append("schedule: " + "; ".join(
        f"+{s.at - start:.0f}s {s.kind} {s.target} ({'-' if s.healed is None else f'{s.healed - s.at:.0f}s'})"
        for s in nemesis.strikes))
    steps = {action: 0 for action in WATCHDOG_LINES}
    for path in (folder / "logs").glob("*.log"):
        text = path.read_text(errors="replace")
        for action, needle in WATCHDOG_LINES.items():
            steps[action] += text.count(needle)
    result.notes.append("stall watchdog steps in the logs: "
                        + ", ".join(f"{k} {v}" for k, v in steps.items()))
    exits = [f"{name} exited {code} at +{t - start:.0f}s ({line[-160:]})"
             for t, name, code, line in pipe.exits]
    result.notes.append(f"exits on their own (started again): {len(exits)}" + ("; " + "; ".join(exits)
                                                                              if exits else ""))
    quarters = rss_quarters(pipe.monitor.memory)
    shown = []
    for name, (first, last, lives, seconds) in quarters.items():
        growth = (last - first) / first if first else 0.0
        # A life shorter than half the nemesis (the process was restarted) is too short to judge; a
        # JVM's heap is not ours to judge; two minutes (--quick) show a process settling to its load
        # (a sink that took over its peer's partitions, a converse catching up on a pause), not a leak.
        judged = (seconds >= 30.0 * nemesis.minutes and not name.startswith(("node-", "broker"))
                  and nemesis.minutes >= JUDGED_MINUTES)
        shown.append(f"{name} {first:.0f}->{last:.0f} MB ({growth:+.0%}"
                     + (f", {lives} lives: its longest, {seconds:.0f} s" if lives > 1 else "") + ")")
        if judged and growth > RSS_LIMIT:
            result.errors.append(f"{name}: RSS grew {growth:+.0%} from the first quarter to the last")
    verdict = ("judged" if nemesis.minutes >= JUDGED_MINUTES
               else f"shown only (under {JUDGED_MINUTES:g} minutes)")
    result.notes.append(f"RSS median first quarter -> last quarter ({verdict}): " + "; ".join(shown))
    with open(folder / "rss.jsonl", "w") as out:  # the series, for a closer look at a process that grew
        for name, mem in sorted(pipe.monitor.memory.items()):
            out.write(json.dumps({"process": name, "lives": [[[round(t, 1), round(mb, 1)] for t, mb in life]
                                                             for life in mem.series]}) + "\n")
    result.memory = pipe.monitor.memory
