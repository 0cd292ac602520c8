"""``eaglefeed sink``: generations → exactly-once Parquet training segments."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.commands._common import add_command, add_kafka_args, kafka_config
from eaglefeed.config import SinkConfig, env_default


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "sink",
                    "write generations into deduplicated Parquet training segments, exactly once")
    p.add_argument("--output", type=Path, required=env_default("OUTPUT", None) is None,
                   default=env_default("OUTPUT", None), help="dataset directory (env EAGLEFEED_OUTPUT)")
    p.add_argument("--group-id", default=env_default("SINK_GROUP", "eaglefeed-sink"))
    p.add_argument("--flush-rows", type=int, default=10000, help="segment size in rows")
    p.add_argument("--flush-bytes", type=int, default=256 * 1024 * 1024, help="segment size in bytes")
    p.add_argument("--flush-seconds", type=float, default=30.0, help="maximum age of a buffered row")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="flush and exit after this long with nothing to read")
    add_kafka_args(p)
    p.set_defaults(run=_run_sink)


def _run_sink(args: argparse.Namespace) -> int:
    from consumers import run_sink
    from eaglefeed.lifecycle import StopSignal

    cfg = SinkConfig(kafka=kafka_config(args, "sink"), output=Path(args.output), group_id=args.group_id,
                     flush_rows=args.flush_rows, flush_bytes=args.flush_bytes,
                     flush_seconds=args.flush_seconds, exit_when_idle=args.exit_when_idle,
                     metrics_port=args.metrics_port)
    summary = run_sink(cfg, stop=StopSignal().install())
    print(f"sink: wrote {summary.rows_written} rows in {summary.segments} segments; dropped "
          f"{summary.duplicates_dropped} duplicates; dead-lettered {summary.dead_lettered}")
    return 0
