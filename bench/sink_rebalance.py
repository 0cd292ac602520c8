"""What one rebalance costs the sink's listener on a large dataset (it runs on kafka-python's IO thread).

Not a test. Builds a dataset of ``--segments`` sink segments over 6 partitions (a manifest
event and a file each; the files are empty, the listener only reads their names), then times
the sink's rebalance callbacks as a real run meets them: the first assignment of a fresh sink
(``cold``), then ``--rounds`` rebalances that revoke and assign the same partitions again after
one more segment was written (``warm``, the steady state). While the listener runs, the group
waits for this member (and kafka-python's heartbeats wait too).

    .venv/bin/python -m bench.sink_rebalance [--segments 10000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.checkpoint import SinkCheckpoint
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import manifest, shards

TOPIC = "bench.generations"
PARTITIONS = 6
ROWS = 100  # per segment, as recorded in the manifest


class _Positions:
    """The consumer calls a checkpoint makes (``seek``, ``commit``), kept local."""

    def __init__(self) -> None:
        self.seeks: dict[TopicPartition, int] = {}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        pass


def build_dataset(root: Path, segments: int) -> None:
    """``segments`` flush events (one per segment, round-robin over the partitions) and their files."""
    folder = root / shards.SEGMENTS
    folder.mkdir(parents=True)
    lines = []
    for n in range(segments):
        partition, first = n % PARTITIONS, (n // PARTITIONS) * ROWS
        name = shards.segment_name(TOPIC, partition, first, first + ROWS - 1)
        (folder / name).touch()
        seg = {"path": f"{shards.SEGMENTS}/{name}", "rows": ROWS, "bytes": 4_000_000, "sha256": "0" * 64,
               "schema_version": 3, "tokens": ROWS * 2000, "loss_tokens": ROWS * 1500, "data_bytes": 3_900_000,
               "freq": f"freq/{Path(name).stem}.npz"}
        lines.append(json.dumps({"kind": "flush", "added": [seg], "offsets": {f"{TOPIC}:{partition}":
                                 [first, first + ROWS - 1]}, "duplicates": 0, "dead_lettered": 0,
                                 "v": 1, "at": 0}, sort_keys=True))
    (root / manifest.MANIFEST).write_text("\n".join(lines) + "\n")


def make_checkpoint(root: Path) -> SinkCheckpoint:
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="bench"), output=root)
    metrics = SinkMetrics.create(CollectorRegistry())
    buffers = Buffers(cfg=cfg, metrics=metrics)
    ids = SinkIds(root=root, metrics=metrics)
    segments = SegmentBuilder(ids=ids, producer=None, dead_letter_topic="bench.dead-letter",  # type: ignore[arg-type]
                              metrics=metrics, crash=lambda step: None)
    return SinkCheckpoint(root=root, consumer=_Positions(), buffers=buffers, segments=segments, ids=ids,
                          metrics=metrics, crash=lambda step: None)


def append_one(root: Path, n: int) -> None:
    """One more (row-less) flush of partition 0, as another sink would append between rebalances."""
    manifest.append_manifest(root, {"kind": "flush", "added": [], "offsets": {f"{TOPIC}:0": [10**9 + n] * 2},
                                    "duplicates": 0, "dead_lettered": 0})


def measure(segments: int, rounds: int) -> dict[str, Any]:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_dataset(root, segments)
        started = time.perf_counter()
        checkpoint = make_checkpoint(root)
        setup = time.perf_counter() - started  # on the main thread, before the consumer subscribes
        try:
            started = time.perf_counter()
            checkpoint.assigned(tps)
            cold = time.perf_counter() - started
            warm = []
            for n in range(rounds):
                append_one(root, n)
                checkpoint.revoked(tps)
                started = time.perf_counter()
                checkpoint.assigned(tps)
                warm.append(time.perf_counter() - started)
        finally:
            checkpoint.close()
    return {"segments": segments, "setup_ms": setup * 1000, "cold_assign_ms": cold * 1000,
            "warm_assign_ms_median": statistics.median(warm) * 1000, "warm_assign_ms_max": max(warm) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = [measure(n, args.rounds) for n in args.segments]
    for r in results:
        print(f"{r['segments']:>6} segments: checkpoint set-up {r['setup_ms']:.1f} ms, first assignment "
              f"{r['cold_assign_ms']:.1f} ms, later assignments median {r['warm_assign_ms_median']:.1f} ms "
              f"(max {r['warm_assign_ms_max']:.1f} ms) for {PARTITIONS} partitions", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
