"""``eaglefeed demo``: the whole pipeline on embedded defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.commands._common import add_command, cache_dir


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "demo", "run the whole pipeline on the bundled sample prompts: local broker, "
                              "SGLang stand-in, producer, one worker, sink")
    p.add_argument("--output", type=Path, default=Path("demo-data"), help="dataset directory (replaced)")
    p.add_argument("--work-dir", type=Path, default=Path(".eaglefeed/demo"),
                   help="broker data and logs of the demo (replaced)")
    p.add_argument("--cache-dir", type=Path, default=cache_dir(), help="Kafka jar cache")
    p.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from eaglefeed.demojob import run_demo

    return run_demo(output=args.output, work_dir=args.work_dir, cache_dir=args.cache_dir)
