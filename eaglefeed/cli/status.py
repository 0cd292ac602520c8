"""``eaglefeed status``: each stage's done, in flight and waiting, rate and ETA, refreshing in a terminal."""

from __future__ import annotations

import argparse
import sys

from eaglefeed.cli._common import add_command, add_connection_args, dataset_location, kafka_config
from eaglefeed.cli._parser import not_read, read_also
from eaglefeed.core.config import (
    DEFAULT_STATUS_INTERVAL,
    STALL_SECONDS,
    ConverseConfig,
    SinkConfig,
    WorkerConfig,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "status", "one screen with each stage's done, in flight and waiting records, rate, "
                                   "ETA, dead letters, the workers' servers (limit, running, waiting) and "
                                   "the dataset's size")
    add_connection_args(p, interactive=True)
    # status observes the stages: it also reads their own variables of what it shows; the generic
    # EAGLEFEED_GROUP_ID no command reads gets a warning rather than silence
    groups = (("--generate-group", WorkerConfig.group_id, "workers", "generate"),
              ("--sink-group", SinkConfig.group_id, "sinks", "sink"),
              ("--converse-group", ConverseConfig.group_id, "converse stage", "converse"))
    for flag, default, of, stage in groups:
        group = p.add_argument(flag, default=default,
                               help=f"consumer group of the {of} (default: <topic prefix>-{stage})")
        not_read(read_also(group, f"{stage.upper()}_GROUP_ID"), "GROUP_ID")
    read_also(p.add_argument("--output", type=dataset_location, default=None,
                             help="the sink's dataset, a directory or s3://bucket/prefix, to show its size "
                                  "and its hidden states (stored, consumed by the trainers, the workers' "
                                  "budget)"), "SINK_OUTPUT")
    p.add_argument("--interval", type=float, default=DEFAULT_STATUS_INTERVAL,
                   help="seconds between refreshes")
    p.add_argument("--stall-seconds", type=float, default=STALL_SECONDS, metavar="SECONDS",
                   help="flag a partition with records left whose progress (committed offset and the done "
                        "offsets above it) has not moved for this long (over the refreshes of one run)")
    p.add_argument("--once", action="store_true",
                   help="print one screen and exit (rates measured over --interval)")
    p.set_defaults(run=_run_status)


def _run_status(args: argparse.Namespace) -> int:
    from eaglefeed.core.lag import LagProbe
    from eaglefeed.core.lifecycle import StopSignal
    from eaglefeed.ops.conversation_status import ConversationFeed
    from eaglefeed.ops.pipeline_status import check_prefix, render, take_snapshot
    from eaglefeed.ops.sink_status import SinksFeed
    from eaglefeed.ops.worker_status import WorkersFeed

    # A flag, not KeyboardInterrupt: a SIGINT landing inside kafka-python while it bootstraps
    # could be swallowed there (the connect loop never saw it and waited its full timeout).
    stop = StopSignal().install()
    kafka = kafka_config(args, "status")
    groups = {"generate": args.generate_group or kafka.default_group("generate"),
              "sink": args.sink_group or kafka.default_group("sink"),
              "converse": args.converse_group or kafka.default_group("converse")}
    probe = LagProbe(kafka=kafka)
    feed = ConversationFeed(kafka=kafka)
    workers = WorkersFeed(kafka=kafka)
    sinks = SinksFeed(kafka=kafka)
    try:
        check_prefix(probe.topics(), kafka)
        # the stages' own reports are read for the first reading too: done counts what they hold,
        # so a first reading without them would make the first rate count it as just finished
        previous = take_snapshot(probe, kafka, groups=groups, dataset=args.output, previous=None,
                                 conversations=feed, workers=workers, sinks=sinks)
        while True:
            if stop.wait(args.interval):
                return 0
            snap = take_snapshot(probe, kafka, groups=groups, dataset=args.output, previous=previous,
                                 conversations=feed, stall_seconds=args.stall_seconds, workers=workers,
                                 sinks=sinks)
            screen = render(snap, kafka)
            if args.once:
                print(screen)
                return 0
            sys.stdout.write("\x1b[2J\x1b[H" + screen + "\n" if sys.stdout.isatty() else screen + "\n\n")
            sys.stdout.flush()
            previous = snap
            if stop.is_set():
                return 0
    finally:
        sinks.close()
        workers.close()
        feed.close()
        probe.close()
