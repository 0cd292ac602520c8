"""``eaglefeed sink``: generations → exactly-once Parquet training segments."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.commands._common import add_command, add_kafka_args, int_env, kafka_config
from eaglefeed.config import SinkConfig, env_default

_DEFAULTS = SinkConfig.__dataclass_fields__


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "sink",
                    "write generations into deduplicated Parquet training segments, exactly once")
    p.add_argument("--output", type=Path, required=env_default("OUTPUT", None) is None,
                   default=env_default("OUTPUT", None), help="dataset directory (env EAGLEFEED_OUTPUT)")
    p.add_argument("--group-id", default=env_default("SINK_GROUP", "eaglefeed-sink"),
                   help="consumer group of the sinks (env EAGLEFEED_SINK_GROUP)")
    p.add_argument("--group-instance-id", default=env_default("SINK_INSTANCE_ID", None),
                   help="static group membership: a sink restarted with the same id gets its partitions "
                        "back without a rebalance (env EAGLEFEED_SINK_INSTANCE_ID)")
    p.add_argument("--flush-rows", type=int, default=_DEFAULTS["flush_rows"].default,
                   help="a partition's segment is written at this many records")
    p.add_argument("--flush-bytes", type=int, default=_DEFAULTS["flush_bytes"].default,
                   help="... or at this many buffered message bytes")
    p.add_argument("--flush-seconds", type=float, default=_DEFAULTS["flush_seconds"].default,
                   help="... or when its oldest buffered record is this many seconds old")
    p.add_argument("--max-buffer-bytes", type=int, default=int_env("SINK_MAX_BUFFER_BYTES",
                                                                   _DEFAULTS["max_buffer_bytes"].default),
                   help="bytes buffered over all partitions before the largest buffer is written "
                        "(bounds memory; env EAGLEFEED_SINK_MAX_BUFFER_BYTES)")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="flush and exit after this long with nothing to read")
    add_kafka_args(p)
    p.set_defaults(run=_run_sink)


def _run_sink(args: argparse.Namespace) -> int:
    from consumers import run_sink
    from eaglefeed.lifecycle import StopSignal

    cfg = SinkConfig(kafka=kafka_config(args, "sink"), output=Path(args.output), group_id=args.group_id,
                     group_instance_id=args.group_instance_id, flush_rows=args.flush_rows,
                     flush_bytes=args.flush_bytes,
                     flush_seconds=args.flush_seconds, max_buffer_bytes=args.max_buffer_bytes,
                     exit_when_idle=args.exit_when_idle, metrics_port=args.metrics_port,
                     # test-only hook, deliberately not a flag: SIGKILL at a commit step
                     crash_at=env_default("SINK_CRASH_AT", None))
    summary = run_sink(cfg, stop=StopSignal().install())
    print(f"sink: wrote {summary.rows_written} rows in {summary.segments} segments; dropped "
          f"{summary.duplicates_dropped} duplicates; dead-lettered {summary.dead_lettered}")
    return 0
