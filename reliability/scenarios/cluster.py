"""A three-node cluster under load: its busiest leader killed and restarted, its controller killed; one lost.

Each scenario starts a cluster of its own (``eaglefeed broker start --nodes 3``: three KRaft
nodes, a three-voter quorum, topics with replication factor 3 and ``min.insync.replicas=2``)
beside the run's single broker, runs the usual pipeline (producer, two workers, sink, a
stand-in) on it, lets the load flow, then strikes one node. The fault's figure per stage is the
time from the first instant of the fault until every partition that had work waiting moved
again (see :mod:`reliability.resume`); the scenario's recovery is the slowest stage.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from reliability.broker import Broker
from reliability.cluster import Cluster
from reliability.monitor import Fault
from reliability.pipeline import PARTITIONS, Pipeline, Shape
from reliability.report import Result
from reliability.resume import ResumeWatch
from reliability.scenarios.common import Settings, execute

log = logging.getLogger(__name__)

OPEN_FEED = 600.0  # the feed's length until the fault sets its end (start-up takes what it takes)
SETTLED_LOAD = 3.0  # seconds of load after the sink's first commit, before the fault
AFTER_STOP = 20.0  # broker-down: seconds of load watched after the stop
RESUME_TIMEOUT = 120.0  # a stage that has not moved this long after the fault never will


def run_leader_kill(broker: Broker, root: Path, settings: Settings) -> Result:
    """SIGKILL the node that leads the most partitions; start it again ``leader_down`` seconds later."""
    return leader_kill("leader-kill", broker, root, settings, open_feed(settings.quick, seed=66))


def run_leader_kill_exactly_once(broker: Broker, root: Path, settings: Settings) -> Result:
    """``leader-kill`` with ``generate --exactly-once`` workers (transactions through a lost leader)."""
    shape = replace(open_feed(settings.quick, seed=67), worker_flags=("--exactly-once",))
    return leader_kill("leader-kill-eos", broker, root, settings, shape)


def leader_kill(name: str, broker: Broker, root: Path, settings: Settings, shape: Shape) -> Result:
    """The leader-kill scenario on ``shape``, reported as ``name``."""
    quick = settings.quick
    down = settings.leader_down if settings.leader_down is not None else (10.0 if quick else 60.0)
    notes: list[str] = []

    def act(pipe: Pipeline, nodes: Cluster, watcher: ResumeWatch) -> None:
        warm_up(pipe)
        leads = nodes.leaders()
        node = max(sorted(leads), key=lambda n: leads[n])
        notes.append(f"partitions led per node before the kill: {dict(sorted(leads.items()))}")
        fault = strike(pipe, nodes, node, kill=True, feed=down + (15.0 if quick else 40.0))
        pipe.wait(max(0.0, down - (time.monotonic() - fault.at)))
        meanwhile(pipe, lambda: nodes.start_node(node))
        fault.ended = time.monotonic()
        log.info("%s: node %d started again after %.1fs", pipe.name, node, fault.ended - fault.at)
        notes.append(watch(pipe, watcher, fault))
        rejoined = until(pipe, lambda: nodes.under_replicated() == 0, timeout=90.0)
        notes.append(f"node {node} back in every in-sync replica set "
                     + (f"{rejoined:.1f} s after its restart" if rejoined is not None else "NOT within 90 s"))
        if rejoined is None:
            pipe.errors.append(f"node {node} did not rejoin the in-sync replicas within 90 s")

    return on_cluster(name, shape, broker, root, act, notes)


def run_controller_kill(broker: Broker, root: Path, settings: Settings) -> Result:
    """SIGKILL the active KRaft controller (the metadata quorum's leader); start it 20 s (quick: 8 s) on."""
    quick = settings.quick
    down = 8.0 if quick else 20.0
    shape = open_feed(quick, seed=77)
    notes: list[str] = []

    def act(pipe: Pipeline, nodes: Cluster, watcher: ResumeWatch) -> None:
        warm_up(pipe)
        node = nodes.controller()
        leads = nodes.leaders()
        notes.append(f"active controller: node {node}, leading {leads[node]} partitions "
                     f"(each node is a broker too)")
        fault = strike(pipe, nodes, node, kill=True, feed=down + (15.0 if quick else 30.0))
        elected = until(pipe, lambda: nodes.controller() != node, timeout=60.0, since=fault.at)
        notes.append(f"a new controller was elected {elected:.1f} s after the kill: node {nodes.controller()}"
                     if elected is not None else "NO new controller within 60 s")
        if elected is None:
            pipe.errors.append("no new controller within 60 s of the kill")
        pipe.wait(max(0.0, down - (time.monotonic() - fault.at)))
        meanwhile(pipe, lambda: nodes.start_node(node))
        fault.ended = time.monotonic()
        notes.append(watch(pipe, watcher, fault))

    return on_cluster("controller-kill", shape, broker, root, act, notes)


def run_broker_down(broker: Broker, root: Path, settings: Settings) -> Result:
    """Stop (SIGTERM) the node that coordinates the workers' group and leave it down to the end of the run."""
    quick = settings.quick
    shape = open_feed(quick, seed=88)
    notes: list[str] = []

    def act(pipe: Pipeline, nodes: Cluster, watcher: ResumeWatch) -> None:
        warm_up(pipe)
        group = f"{pipe.kafka.topic_prefix}-generate"
        node = nodes.coordinator(group)
        notes.append(f"node {node} coordinates {group} and leads {nodes.leaders()[node]} partitions; "
                     "stopped for the rest of the run")
        fault = strike(pipe, nodes, node, kill=False, feed=AFTER_STOP + (5.0 if quick else 30.0))
        pipe.wait(max(0.0, AFTER_STOP - (time.monotonic() - fault.at)))  # stalls show up in this window
        notes.append(watch(pipe, watcher, fault))
        notes.append(f"under-replicated partitions with node {node} down: {nodes.under_replicated()}")

    return on_cluster("broker-down", shape, broker, root, act, notes)


# --- the frame ----------------------------------------------------------------------------
def on_cluster(name: str, shape: Shape, broker: Broker, root: Path,
               act: Callable[[Pipeline, Cluster, ResumeWatch], None], notes: list[str]) -> Result:
    """Start a cluster of the scenario's own, run the pipeline on it with ``act``, stop the cluster."""
    nodes = Cluster(data_dir=root / f"{name}-cluster", cache_dir=broker.cache_dir)
    try:
        nodes.start()
        result = execute(name, shape, nodes, root, lambda pipe: watched(pipe, nodes, act))
    except Exception:  # noqa: BLE001 - a cluster that would not start fails this scenario only
        result = Result(scenario=name, outcome=None, errors=[traceback.format_exc()])
    finally:
        nodes.stop()
    result.notes = notes + result.notes
    return result


def watched(pipe: Pipeline, nodes: Cluster, act: Callable[[Pipeline, Cluster, ResumeWatch], None]) -> None:
    """``act`` with a :class:`ResumeWatch` on the pipeline's groups and topics (readings kept in its dir)."""
    prefix = pipe.kafka.topic_prefix
    groups = {"worker": f"{prefix}-generate", "sink": f"{prefix}-sink"}
    if pipe.shape.conversations:  # the converse stage runs too (the nemesis)
        groups["converse"] = f"{prefix}-converse"
    watcher = ResumeWatch(kafka=pipe.kafka, partitions=PARTITIONS, groups=groups).start()
    try:
        act(pipe, nodes, watcher)
    finally:
        watcher.stop()
        watcher.dump(pipe.dir / "resume-readings.jsonl", since=pipe.monitor.started)


def warm_up(pipe: Pipeline) -> None:
    """Wait until every stage is moving (the sink committed rows), then a few seconds more."""
    pipe.wait_until_flowing()
    pipe.wait(SETTLED_LOAD)


def open_feed(quick: bool, *, seed: int) -> Shape:
    """Prompts at 10 a second (quick) or 30 until :func:`strike` ends the feed some time after the fault."""
    rate = 10 if quick else 30
    return Shape(prompts=round(rate * OPEN_FEED), feed_seconds=OPEN_FEED, timeout=OPEN_FEED, seed=seed)


def end_feed(pipe: Pipeline, end: float) -> None:
    """Make the feed end at ``end`` (``time.monotonic()``), at the same rate."""
    rate = pipe.shape.prompts / pipe.shape.feed_seconds
    total = max(1.0, end - pipe.monitor.started)
    pipe.shape = replace(pipe.shape, prompts=round(rate * total), feed_seconds=total)


def strike(pipe: Pipeline, nodes: Cluster, node: int, *, kill: bool, feed: float) -> Fault:
    """SIGKILL (``kill``) or stop node ``node``; the fault is recorded from this instant.

    Prompts keep coming for ``feed`` seconds after it, then stop.
    """
    at = time.monotonic()
    end_feed(pipe, at + feed)
    if kill:
        nodes.kill_node(node)
    else:
        meanwhile(pipe, lambda: nodes.stop_node(node))  # a clean stop takes seconds
    fault = Fault(stage="broker", target=f"node-{node}", at=at, ended=time.monotonic())
    pipe.faults.append(fault)
    log.info("%s: node %d %s", pipe.name, node, "SIGKILLed" if kill else "stopped")
    return fault


def watch(pipe: Pipeline, watcher: ResumeWatch, fault: Fault) -> str:
    """Keep feeding until every stage resumed (or :data:`RESUME_TIMEOUT`); record the times on ``fault``.

    Returns:
        a note: per stage, the longest time one of its partitions stood still with work waiting
        from the fault to now, and the readings' resolution (the longest gap between two).
    """
    while True:
        times = watcher.resume_times(fault.at)
        if float("inf") not in times.values() or time.monotonic() - fault.at > RESUME_TIMEOUT:
            break
        pipe.wait(0.5)
    fault.resume = times
    seen = [t for t in times.values() if t is not None]
    fault.recovery = max(seen) if seen else None
    log.info("%s: resumed %s", pipe.name, {s: None if t is None else round(t, 1) for s, t in times.items()})
    last = max(seen) if seen and max(seen) != float("inf") else RESUME_TIMEOUT
    gap = watcher.longest_gap(fault.at - 1.0, fault.at + last + 1.0)
    feed_end = pipe.monitor.started + pipe.shape.feed_seconds  # after it the producer has nothing to do
    now = min(time.monotonic(), feed_end)
    stalls = watcher.longest_stall(fault.at, now)
    shown = ", ".join(f"{stage} {'-' if t is None else f'{t:.1f} s'}" for stage, t in stalls.items())
    return (f"longest stall of a partition with work waiting from the fault to +{now - fault.at:.0f} s: "
            f"{shown}; longest gap between two offset readings: {gap:.2f} s")


def meanwhile(pipe: Pipeline, action: Callable[[], None]) -> None:
    """Run ``action`` (starting or stopping a node: seconds) while the pipeline keeps being fed."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - raised again on the scenario's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="reliability-node", daemon=True)
    thread.start()
    while thread.is_alive():
        pipe.wait(0.2)
    if failed:
        raise failed[0]


def until(pipe: Pipeline, check: Callable[[], bool], *, timeout: float,
          since: float | None = None) -> float | None:
    """Keep feeding until ``check()`` holds: seconds since ``since`` (default now); None after ``timeout``."""
    start = since if since is not None else time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return time.monotonic() - start
        except Exception as exc:  # noqa: BLE001 - the cluster may not answer during the fault
            log.debug("check failed: %r", exc)
        pipe.wait(0.5)
    return None
