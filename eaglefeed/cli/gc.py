"""``eaglefeed gc``: delete the hidden-state files that no row of a dataset names."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    from eaglefeed.dataset.collect import DEFAULT_GRACE_SECONDS

    p = add_command(sub, "gc", "delete hidden-state files that no row names (failed checks, retries, "
                               "duplicates, dropped rows); never one a row names; safe while the sink runs")
    p.add_argument("dataset", type=Path, help="dataset directory (the sink's --output)")
    p.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS, metavar="SECONDS",
                   help="keep unnamed files younger than this: records still in Kafka name files that no "
                        "row names yet (the sink stops on a missing one)")
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    p.set_defaults(run=_run_gc)


def _run_gc(args: argparse.Namespace) -> int:
    from eaglefeed.dataset.collect import collect

    summary = collect(args.dataset, grace_seconds=args.grace_seconds, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"gc: {summary.referenced} files named by rows kept; {verb} {summary.deleted} unnamed files "
          f"({summary.deleted_bytes / 1e6:.1f} MB); kept {summary.young} unnamed files younger than "
          f"{args.grace_seconds:.0f} s")
    if summary.missing:
        print(f"gc: {summary.missing} files that rows name are missing from {args.dataset}/hidden_states")
        return 1
    return 0
