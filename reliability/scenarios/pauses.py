"""SIGSTOP a sink or a worker past its session timeout, let the group move its partitions, SIGCONT it.

The paused process wakes up with work it still believes is its own: a sink with segments queued
for partitions another sink now writes (its writes are fenced off by the new owner's claim in
the manifest), a worker with prompts in flight that another worker generates again (the sink
keeps one row of each id). Neither may double or lose a row, and both must go on by themselves.
"""

from __future__ import annotations

from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import Settings, execute

FENCED = "has a newer owner"  # the sink's log line for a segment fenced off
LOST = "in-flight work will be re-done"  # the worker's log line for partitions lost without a revoke

SINK_SESSION = 6.0  # --session-timeout of the sinks (seconds); the workers' is 6 s too (WORKER_FLAGS)


def run_sink_pause(broker: Broker, root: Path, settings: Settings) -> Result:
    """Two sinks share the dataset; one is paused 1.7x past its session timeout (once, or twice)."""
    quick = settings.quick
    shape = Shape(prompts=600 if quick else 2000, feed_seconds=25 if quick else 60, sinks=2, seed=31,
                  sink_flags=("--session-timeout", str(SINK_SESSION)))

    def act(pipe: Pipeline) -> None:
        for n in range(1 if quick else 2):
            name = "sink" if n % 2 == 0 else "sink-1"
            pipe.wait_for_log(name, "assigned ['")  # it holds partitions ...
            pipe.wait(pipe.rng.uniform(2.0, 4.0))  # ... and writes segments of them
            pipe.settle(pipe.pause(name, 1.7 * SINK_SESSION, "sink"))

    return _noted(execute("sink-pause", shape, broker, root, act), root / "sink-pause", "sink", FENCED,
                  "segments the paused sink had queued and wrote no more (fenced off)")


def run_worker_pause(broker: Broker, root: Path, settings: Settings) -> Result:
    """Two workers; one is paused 1.7x past its 6 s session timeout, prompts in flight (once, or twice)."""
    quick = settings.quick
    shape = Shape(prompts=600 if quick else 2000, feed_seconds=25 if quick else 60, seed=41)

    def act(pipe: Pipeline) -> None:
        for n in range(1 if quick else 2):
            name = f"worker-{n % shape.workers}"
            pipe.wait_for_log(name, "assigned ['")  # it holds partitions ...
            pipe.wait(pipe.rng.uniform(2.0, 4.0))  # ... and has prompts in flight
            pipe.settle(pipe.pause(name, 1.7 * 6.0, "worker"))

    return _noted(execute("worker-pause", shape, broker, root, act), root / "worker-pause", "worker", LOST,
                  "times a paused worker found its partitions lost")


def _noted(result: Result, folder: Path, prefix: str, needle: str, what: str) -> Result:
    """Count ``needle`` in the logs of the ``prefix*`` processes into the result's notes."""
    logs = (folder / "logs").glob(f"{prefix}*.log")
    count = sum(log.read_text(errors="replace").count(needle) for log in logs)
    result.notes.append(f"{what}: {count}")
    return result
