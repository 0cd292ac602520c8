"""``eaglefeed sink``: generations → exactly-once Parquet training segments."""

from __future__ import annotations

import argparse

from eaglefeed.cli._common import (
    add_command,
    add_kafka_args,
    add_stall_arg,
    dataset_dir,
    dataset_location,
    kafka_config,
)
from eaglefeed.cli._parser import use_env
from eaglefeed.core.config import SinkConfig, env_default

_S = SinkConfig  # its field defaults are the flags' defaults


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "sink",
                    "write generations into deduplicated Parquet training segments, exactly once")
    p.add_argument("--output", type=dataset_location, required=True,
                   help="the dataset: a directory, or s3://bucket/prefix in an S3-compatible store (endpoint "
                        "and credentials from the AWS_* variables; a local mirror in the cache dir)")
    use_env(p.add_argument("--group-id", default=_S.group_id,
                           help="consumer group of the sinks (default: <topic prefix>-sink)"),
            "SINK_GROUP")
    use_env(p.add_argument("--group-instance-id", default=_S.group_instance_id,
                           help="static group membership: a sink restarted with the same id gets its "
                                "partitions back without a rebalance"),
            "SINK_INSTANCE_ID")
    p.add_argument("--session-timeout", type=float, default=_S.session_timeout,
                   help="seconds before the group gives a silent sink's partitions to others "
                        "(default: eaglefeed's consumer default, 20)")
    p.add_argument("--flush-rows", type=int, default=_S.flush_rows,
                   help="a partition's segment is written at this many records")
    p.add_argument("--flush-bytes", type=int, default=_S.flush_bytes,
                   help="... or at this many buffered message bytes")
    p.add_argument("--flush-seconds", type=float, default=_S.flush_seconds,
                   help="... or when its oldest buffered record is this many seconds old")
    p.add_argument("--max-buffer-bytes", type=int, default=_S.max_buffer_bytes,
                   help="bytes buffered over all partitions before the largest buffer is written "
                        "(bounds memory)")
    p.add_argument("--exit-when-idle", type=float, default=_S.exit_when_idle, metavar="SECONDS",
                   help="exit once caught up (every assigned partition read to its end, nothing "
                        "buffered, the generate group's prompts all done: --upstream-group) for "
                        "this long; what is buffered is written first. A generations topic that "
                        "does not appear within this long is an error")
    p.add_argument("--upstream-group", default=_S.upstream_group, metavar="GROUP",
                   help="the generate workers' group: --exit-when-idle waits while it has prompts "
                        "left and a member, and exits non-zero when it has them left and no member "
                        "(default: <topic prefix>-generate)")
    p.add_argument("--progress-seconds", type=float, default=_S.progress_seconds, metavar="SECONDS",
                   help="log a progress line this often: records done, rows written, rate, this "
                        "sink's lag and ETA (0: none)")
    add_stall_arg(p)
    add_kafka_args(p)
    p.set_defaults(run=_run_sink)


def sink_config(args: argparse.Namespace) -> SinkConfig:
    """The SinkConfig that parsed ``sink`` flags describe."""
    return SinkConfig(kafka=kafka_config(args, "sink"), output=dataset_dir(args.output),
                      group_id=args.group_id, group_instance_id=args.group_instance_id,
                      session_timeout=args.session_timeout,
                      flush_rows=args.flush_rows,
                      flush_bytes=args.flush_bytes,
                      flush_seconds=args.flush_seconds, max_buffer_bytes=args.max_buffer_bytes,
                      exit_when_idle=args.exit_when_idle, stall_seconds=args.stall_seconds or None,
                      metrics_port=args.metrics_port, progress_seconds=args.progress_seconds,
                      upstream_group=args.upstream_group,
                      # test-only hook, deliberately not a flag: SIGKILL at a commit step
                      crash_at=env_default("SINK_CRASH_AT", None))


def _run_sink(args: argparse.Namespace) -> int:
    from eaglefeed.consumers.sink import run_sink
    from eaglefeed.core.lifecycle import StopSignal

    summary = run_sink(sink_config(args), stop=StopSignal().install())
    stalled = summary.upstream_stalled
    if stalled is not None:  # caught up, but not finished: nobody is generating what is left
        end = (f"; exited idle with {stalled.lag} prompts not yet generated upstream (group "
               f"{stalled.group}, no member)")
    elif summary.lag_at_exit is not None:
        end = f"; lag at exit {summary.lag_at_exit}"
    else:
        end = ""
    print(f"sink: wrote {summary.rows_written} rows in {summary.segments} segments; dropped "
          f"{summary.duplicates_dropped} duplicates; dead-lettered {summary.dead_lettered}{end}", flush=True)
    return 1 if stalled is not None else 0
