"""``eaglefeed demo``: the whole pipeline on embedded defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command
from eaglefeed.core.config import DEFAULT_CACHE_DIR, DEFAULT_DEMO_DIR, DEFAULT_DEMO_OUTPUT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "demo", "run the whole pipeline on the bundled sample prompts: local broker, "
                              "SGLang stand-in, producer, one worker, sink")
    # Both folders are replaced; their variables are the demo's own (EAGLEFEED_DEMO_OUTPUT, ...).
    p.add_argument("--output", type=Path, default=Path(DEFAULT_DEMO_OUTPUT),
                   help="dataset directory (replaced)")
    p.add_argument("--work-dir", type=Path, default=Path(DEFAULT_DEMO_DIR),
                   help="broker data and logs of the demo (replaced)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="Kafka jar cache")
    p.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from eaglefeed.cli.demo_job import run_demo

    return run_demo(output=args.output, work_dir=args.work_dir, cache_dir=args.cache_dir)
