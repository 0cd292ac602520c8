"""``eaglefeed status``: one screen with each stage's progress, rate, lag, ETA and the dataset size."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from eaglefeed.core.config import STALL_SECONDS, KafkaConfig
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.lag import LagProbe
from eaglefeed.ops.conversation_status import ConversationFeed, ConversationView
from eaglefeed.ops.worker_status import WorkersFeed, WorkersView


@dataclass(frozen=True)
class StalledPartition:
    """A partition with records left whose group's committed offset has not moved for ``seconds``."""

    partition: int
    committed: int
    end: int
    seconds: float


@dataclass(frozen=True)
class StageView:
    """What one consuming stage has done and has left."""

    name: str
    topic: str
    done: int
    total: int
    rate: float | None
    stalled: tuple[StalledPartition, ...] = ()

    @property
    def lag(self) -> int:
        """Records left."""
        return max(0, self.total - self.done)

    @property
    def eta_seconds(self) -> float | None:
        """Seconds to drain the lag at the current rate (None when unknown or stalled)."""
        if self.lag == 0:
            return 0.0
        if not self.rate:
            return None
        return self.lag / self.rate


@dataclass(frozen=True)
class Snapshot:
    """Everything one status screen shows."""

    taken_at: float
    prompts: int
    stages: list[StageView]
    dead_letters: int
    dataset: tuple[int, int, int] | None  # rows, segments, bytes
    conversations: ConversationView | None = None  # regenerated conversations, when there are any
    workers: WorkersView | None = None  # what the generate workers report of their servers
    moved: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    """(stage, partition) → its committed offset and when it was first seen at that offset."""


def take_snapshot(probe: LagProbe, kafka: KafkaConfig, *, groups: dict[str, str],
                  dataset: Path | None, previous: Snapshot | None,
                  conversations: ConversationFeed | None = None,
                  stall_seconds: float = STALL_SECONDS, workers: WorkersFeed | None = None) -> Snapshot:
    """Measure the pipeline once; rates and stalls come from the difference to ``previous``.

    The converse stage is shown when ``groups`` names it and the conversations topic has events.
    A partition with records left whose committed offset has stayed put for ``stall_seconds``
    (over this and earlier snapshots) is flagged as stalled: the stages' own watchdogs act on
    the same sign (``eaglefeed.core.watchdog``). ``workers`` reads the workers' own reports.
    """
    now = time.monotonic()
    view = conversations.read() if conversations is not None else None
    if view is not None and not view.conversations:
        view = None
    topics = {"generate": kafka.prompts_topic, "sink": kafka.generations_topic}
    if view is not None and "converse" in groups:
        topics = {"generate": kafka.prompts_topic, "converse": kafka.generations_topic,
                  "sink": kafka.generations_topic}
    stages = []
    moved: dict[tuple[str, int], tuple[int, float]] = {}
    for name, topic in topics.items():
        parts = probe.measure(groups[name], topic)
        done = sum(p.committed for p in parts)
        rate = None
        if previous is not None:
            before = next((s for s in previous.stages if s.name == name), None)
            elapsed = now - previous.taken_at
            if before is not None and elapsed > 0:
                rate = max(0.0, (done - before.done) / elapsed)
        stalled = []
        for part in parts:
            seen = previous.moved.get((name, part.partition)) if previous is not None else None
            since = seen[1] if seen is not None and seen[0] == part.committed else now
            moved[(name, part.partition)] = (part.committed, since)
            # A lag of 1 that stays can be the commit marker after an --exactly-once worker's
            # last record (readers commit one past the record): not flagged.
            if part.lag > 1 and now - since >= stall_seconds:
                stalled.append(StalledPartition(part.partition, part.committed, part.end, now - since))
        stages.append(StageView(name=name, topic=topic, done=done, total=sum(p.end for p in parts),
                                rate=rate, stalled=tuple(stalled)))
    return Snapshot(taken_at=now, prompts=sum(probe.end_offsets(kafka.prompts_topic).values()),
                    stages=stages,
                    dead_letters=sum(probe.end_offsets(kafka.dead_letter_topic).values()),
                    dataset=_dataset_size(dataset) if dataset is not None else None, conversations=view,
                    moved=moved, workers=workers.read() if workers is not None else None)


def render(snapshot: Snapshot, kafka: KafkaConfig) -> str:
    """The status screen as text."""
    lines = [f"eaglefeed status   broker {kafka.bootstrap_servers}   topics {kafka.topic_prefix}.*   "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}", "",
             f"{'stage':<10}{'input topic':<34}{'done':>10}{'total':>10}{'lag':>9}{'rate/s':>9}{'ETA':>10}",
             f"{'produce':<10}{'→ ' + kafka.prompts_topic:<34}{snapshot.prompts:>10}"]
    for s in snapshot.stages:
        rate = "-" if s.rate is None else f"{s.rate:.1f}"
        lines.append(f"{s.name:<10}{s.topic:<34}{s.done:>10}{s.total:>10}{s.lag:>9}{rate:>9}"
                     f"{_eta(s.eta_seconds):>10}")
    for s in snapshot.stages:
        for part in s.stalled:
            lines.append(f"  STALLED  {s.name}: {s.topic}-{part.partition} at {part.committed} of "
                         f"{part.end}, no progress for {_eta(part.seconds)}")
    if snapshot.workers is not None:
        lines += ["", *snapshot.workers.lines()]
    lines += ["", f"dead letters: {snapshot.dead_letters} in {kafka.dead_letter_topic}"]
    if snapshot.conversations is not None:
        lines += snapshot.conversations.lines()
    if snapshot.dataset is not None:
        rows, segments, size = snapshot.dataset
        lines.append(f"dataset: {rows} rows in {segments} segments, {size / 1e6:.1f} MB")
    return "\n".join(lines)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _dataset_size(root: Path) -> tuple[int, int, int]:
    from eaglefeed.dataset import live_segments, read_manifest

    live = live_segments(read_manifest(root))
    return (sum(s["rows"] for s in live.values()), len(live), sum(s["bytes"] for s in live.values()))


PIPELINE_SUFFIXES = (".prompts", ".generations", ".dead-letter", ".conversations")


def check_prefix(topics: Iterable[str], kafka: KafkaConfig) -> None:
    """Stop unless the cluster has a topic of ``kafka``'s prefix, naming the prefixes it has.

    Args:
        topics: every topic on the cluster.
        kafka: the prefix and the address shown.

    Raises:
        ConfigError: when no topic of the prefix exists (a mistyped ``--topic-prefix`` would
            otherwise show a screen of zeros).
    """
    names = set(topics)
    if any(kafka.topic_prefix + suffix in names for suffix in PIPELINE_SUFFIXES):
        return
    seen = sorted({name[:-len(suffix)] for name in names for suffix in PIPELINE_SUFFIXES
                   if name.endswith(suffix) and len(name) > len(suffix)})
    there = ", ".join(seen) if seen else "none yet (produce creates them)"
    raise ConfigError(f"no topics with --topic-prefix {kafka.topic_prefix!r} on {kafka.bootstrap_servers}; "
                      f"prefixes there: {there}")
