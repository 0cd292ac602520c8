"""When each stage moved again after a fault of the cluster, read from the monitor's snapshots.

A stage has *resumed* once every partition that had work waiting when the fault struck has
moved since: the worker's and the sink's committed offsets (``generate`` and ``sink`` groups),
and for the producer the end offset of every prompts partition. Partitions on healthy nodes
move at once; the ones the fault took away move only after a new leader (or coordinator) took
over, so the time is that of the slowest partition: the whole stage moving, not its healthy part.
Times count from the fault's first instant (the SIGKILL), not from its end.
"""

from __future__ import annotations

from reliability.monitor import Snapshot

STAGES = ("worker", "sink", "producer")


def resume_times(snapshots: list[Snapshot], at: float, *, feeding: bool = True) -> dict[str, float | None]:
    """Stage → seconds from ``at`` until it resumed (``inf``: not yet; None: no work to see it by).

    Args:
        snapshots: the monitor's readings so far.
        at: the fault's first instant (``time.monotonic()``).
        feeding: whether prompt lines were still being appended after ``at`` (else the
            producer had nothing to publish and its resume cannot be seen).
    """
    before = [s for s in snapshots if s.t <= at]
    after = [s for s in snapshots if s.t > at]
    if not before:
        return dict.fromkeys(STAGES)
    base = before[-1]
    times: dict[str, float | None] = {}
    for stage in STAGES:
        waiting = _waiting(base, stage, feeding=feeding)
        if not waiting:
            times[stage] = None
            continue
        moved = next((s for s in after
                      if all(_value(s, stage, p) > value for p, value in waiting.items())), None)
        times[stage] = float("inf") if moved is None else moved.t - at
    return times


def _waiting(base: Snapshot, stage: str, *, feeding: bool) -> dict[int, int]:
    """Partition → its value at ``base``, for the partitions where ``stage`` had work waiting."""
    if stage == "producer":
        parts = base.offsets.get("generate", {})
        return {p: end for p, (_committed, end) in parts.items()} if feeding else {}
    group = "generate" if stage == "worker" else "sink"
    return {p: committed for p, (committed, end) in base.offsets.get(group, {}).items() if committed < end}


def _value(snap: Snapshot, stage: str, partition: int) -> int:
    if stage == "producer":
        return snap.offsets.get("generate", {}).get(partition, (0, -1))[1]
    group = "generate" if stage == "worker" else "sink"
    return snap.offsets.get(group, {}).get(partition, (-1, 0))[0]
