"""``eaglefeed status``: one screen with each stage's progress, rate, ETA and the dataset size.

Each stage's row says what a person means by progress: done, in flight (taken, not finished),
waiting (not taken yet). Its committed offsets alone say too little:

- generate finishes prompts out of order but commits only their contiguous prefix; the offsets
  it finished above it travel in the commit's metadata (``eaglefeed.schemas.done_offsets``) and
  count as done too. In flight is what the workers' reports say they took and have not finished.
- sink commits a partition only once its segment is written, up to ``--flush-seconds`` after it
  read the records: what the live sinks report holding counts as done.
- converse commits what it handled, in order.

The rate is of done over the refreshes of the last :data:`RATE_SECONDS`, so a few seconds in
which nothing finished do not read as a stall.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from eaglefeed.core.config import STALL_SECONDS, KafkaConfig
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.lag import LagProbe, PartitionLag
from eaglefeed.dataset.store import ObjectStore, is_remote, mirror_of, open_dataset
from eaglefeed.ops.conversation_status import ConversationFeed, ConversationView
from eaglefeed.ops.sink_status import SinksFeed
from eaglefeed.ops.states_status import StatesView, read_states
from eaglefeed.ops.worker_status import WorkersFeed, WorkersView
from eaglefeed.schemas.done_offsets import decode_done

RATE_SECONDS = 60.0
"""The rate is measured over the refreshes of about this long (steadier than one refresh)."""

Sample = tuple[float, int]
"""When (monotonic seconds) a stage was seen, and its done count then."""


@dataclass(frozen=True)
class StalledPartition:
    """A partition with records left whose group's progress has not moved for ``seconds``."""

    partition: int
    committed: int
    end: int
    seconds: float


@dataclass(frozen=True)
class StageView:
    """What one consuming stage has done, has in hand, and has left.

    Args:
        name: the stage.
        topic: its input topic.
        done: records finished, by the stage's own account (see the module's docstring).
        total: records in its input topic.
        rate: done per second lately; None before a second reading.
        stalled: partitions that have not moved for long.
        in_flight: records taken and not finished; None when the stage does not say.
        note: a line under the table about what ``done`` counts beyond the committed offsets.
    """

    name: str
    topic: str
    done: int
    total: int
    rate: float | None
    stalled: tuple[StalledPartition, ...] = ()
    in_flight: int | None = None
    note: str = ""

    @property
    def lag(self) -> int:
        """Records not finished (in flight or waiting)."""
        return max(0, self.total - self.done)

    @property
    def waiting(self) -> int:
        """Records not taken yet."""
        return max(0, self.lag - (self.in_flight or 0))

    @property
    def eta_seconds(self) -> float | None:
        """Seconds to finish the lag at the current rate (None when unknown or stalled)."""
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
    states: StatesView | None = None  # the dataset's hidden-state store, consumption and budget
    moved: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    """(stage, partition) → its progress (committed, plus done above) and when it was first seen there."""
    samples: dict[str, tuple[Sample, ...]] = field(default_factory=dict)
    """stage → its done counts over the last :data:`RATE_SECONDS` (the rate's window)."""

    @property
    def next_prompts(self) -> int:
        """Prompts of the prompts topic that converse published (next turns), not the producer."""
        return min(self.prompts, self.conversations.next_prompts) if self.conversations is not None else 0

    @property
    def produced(self) -> int:
        """Prompts the producer published."""
        return self.prompts - self.next_prompts


def take_snapshot(probe: LagProbe, kafka: KafkaConfig, *, groups: dict[str, str],
                  dataset: str | Path | None, previous: Snapshot | None,
                  conversations: ConversationFeed | None = None,
                  stall_seconds: float = STALL_SECONDS, workers: WorkersFeed | None = None,
                  sinks: SinksFeed | None = None) -> Snapshot:
    """Measure the pipeline once; rates and stalls come from the difference to ``previous``.

    The converse stage is shown when ``groups`` names it and the conversations topic has events.
    A partition with records left whose progress has stayed put for ``stall_seconds`` (over this
    and earlier snapshots) is flagged as stalled: the stages' own watchdogs act on the same sign
    (``eaglefeed.core.watchdog``). ``workers`` and ``sinks`` read the stages' own reports: what
    the workers have in flight, what the sinks hold for their next segments. ``dataset`` is the
    sink's ``--output``, a directory or ``s3://bucket/prefix`` (its manifest pulled, its store measured).
    """
    now = time.monotonic()
    root, store = _dataset_home(dataset)
    view = conversations.read() if conversations is not None else None
    if view is not None and not view.conversations:
        view = None
    workers_view = workers.read() if workers is not None else None
    sinks_view = sinks.read() if sinks is not None else None
    topics = {"generate": kafka.prompts_topic, "sink": kafka.generations_topic}
    if view is not None and "converse" in groups:
        topics = {"generate": kafka.prompts_topic, "converse": kafka.generations_topic,
                  "sink": kafka.generations_topic}
    stages = []
    moved: dict[tuple[str, int], tuple[int, float]] = {}
    samples: dict[str, tuple[Sample, ...]] = {}
    for name, topic in topics.items():
        parts = probe.measure(groups[name], topic)
        total = sum(p.end for p in parts)
        committed = sum(p.committed for p in parts)
        done = sum(_done(p) for p in parts)
        in_flight, note = None, ""
        if done > committed:
            note = f"  {name}: {done - committed} of them finished out of order, above the committed offsets"
        if name == "generate" and workers_view is not None:
            in_flight = workers_view.prompts_in_flight()
            in_flight = None if in_flight is None else min(in_flight, total - done)
        if name == "sink" and sinks_view is not None:
            held = min(sinks_view.buffered(), total - done)
            if held > 0:
                done += held
                flush = sinks_view.flush_seconds()
                note = f"  sink: {held} of them buffered, written within --flush-seconds {flush:g}"
        history = previous.samples.get(name, ()) if previous is not None else ()
        rate, samples[name] = _rate(history, now, done)
        stalled = []
        for part in parts:
            at = _done(part)
            seen = previous.moved.get((name, part.partition)) if previous is not None else None
            since = seen[1] if seen is not None and seen[0] == at else now
            moved[(name, part.partition)] = (at, since)
            # A lag of 1 that stays can be the commit marker after an --exactly-once worker's
            # last record (readers commit one past the record): not flagged.
            if part.end - at > 1 and now - since >= stall_seconds:
                stalled.append(StalledPartition(part.partition, part.committed, part.end, now - since))
        stages.append(StageView(name=name, topic=topic, done=done, total=total, rate=rate,
                                stalled=tuple(stalled), in_flight=in_flight, note=note))
    return Snapshot(taken_at=now, prompts=sum(probe.end_offsets(kafka.prompts_topic).values()),
                    stages=stages,
                    dead_letters=sum(probe.end_offsets(kafka.dead_letter_topic).values()),
                    dataset=_dataset_size(root) if root is not None else None, conversations=view,
                    moved=moved, workers=workers_view, samples=samples,
                    states=read_states(root, store=store) if root is not None else None)


def _done(part: PartitionLag) -> int:
    """A partition's finished records: its committed offset, plus those its metadata lists above it."""
    return min(part.end, part.committed + len(decode_done(part.committed, part.metadata)))


def _rate(history: tuple[Sample, ...], now: float, done: int) -> tuple[float | None, tuple[Sample, ...]]:
    """Done per second since the oldest sample of the window (None without one), and the new window."""
    window = tuple(s for s in history if now - s[0] <= RATE_SECONDS) or history[-1:]
    kept = (*window, (now, done))
    if not window or now <= window[0][0]:
        return None, kept
    return max(0.0, (done - window[0][1]) / (now - window[0][0])), kept


def render(snapshot: Snapshot, kafka: KafkaConfig) -> str:
    """The status screen as text."""
    produced = f"{'produce':<10}{'→ ' + kafka.prompts_topic:<34}{snapshot.produced:>10}"
    if snapshot.next_prompts:
        produced += f"   (+{snapshot.next_prompts} next-turn prompts published by converse)"
    lines = [f"eaglefeed status   broker {kafka.bootstrap_servers}   topics {kafka.topic_prefix}.*   "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}", "",
             f"{'stage':<10}{'input topic':<34}{'done':>10}{'in flight':>11}{'waiting':>9}{'total':>10}"
             f"{'rate/s':>9}{'ETA':>10}", produced]
    for s in snapshot.stages:
        rate = "-" if s.rate is None else f"{s.rate:.1f}"
        in_flight = "-" if s.in_flight is None else str(s.in_flight)
        lines.append(f"{s.name:<10}{s.topic:<34}{s.done:>10}{in_flight:>11}{s.waiting:>9}{s.total:>10}"
                     f"{rate:>9}{_eta(s.eta_seconds):>10}")
    lines += [s.note for s in snapshot.stages if s.note]
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
    if snapshot.states is not None:
        lines += snapshot.states.lines()
    return "\n".join(lines)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _dataset_home(dataset: str | Path | None) -> tuple[Path | None, ObjectStore | None]:
    """The directory ``status`` reads of the dataset (a store's mirror, its manifest pulled) and its store."""
    if dataset is None or not is_remote(dataset):
        return (None if dataset is None else Path(dataset)), None
    root = open_dataset(dataset, fetch=False)
    mirror = mirror_of(root)
    return root, None if mirror is None else mirror.store


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
