"""``eaglefeed compact`` and ``eaglefeed gc``: a dataset's upkeep, both safe while the sink runs.

``compact`` merges small segments into training shards; ``gc`` deletes the hidden-state files no
row names.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command
from eaglefeed.core.config import DEFAULT_COMPACT_TARGET_BYTES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands to ``sub``."""
    _register_compact(sub)
    _register_gc(sub)


def _register_compact(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(sub, "compact", "merge small segments into training shards of a target size, "
                                    "optionally dropping rows; safe while the sink is writing")
    p.add_argument("dataset", type=Path, help="dataset directory (the sink's --output)")
    p.add_argument("--target-bytes", type=int, default=DEFAULT_COMPACT_TARGET_BYTES,
                   help="shard size to aim for")
    p.add_argument("--drop-finish-reasons", default="", metavar="REASON[,REASON]",
                   help="drop rows with these finish reasons, e.g. length,abort")
    p.add_argument("--min-loss-tokens", type=int, default=0,
                   help="drop rows with fewer generated (loss_mask=1) tokens")
    p.add_argument("--include-partial", action="store_true",
                   help="also merge the last group when it is below the target (e.g. after the sink stopped)")
    p.set_defaults(run=_run_compact)


def _run_compact(args: argparse.Namespace) -> int:
    from eaglefeed.dataset import CompactOptions, compact, live_segments, read_manifest

    reasons = frozenset(r.strip() for r in args.drop_finish_reasons.split(",") if r.strip())
    summary = compact(args.dataset, CompactOptions(
        target_bytes=args.target_bytes, drop_finish_reasons=reasons, min_loss_tokens=args.min_loss_tokens,
        include_partial=args.include_partial))
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(summary.dropped.items())) or "none"
    print(f"compact: {summary.inputs} files ({summary.rows_in} rows, {summary.bytes_in / 1e6:.1f} MB) → "
          f"{summary.shards} shards ({summary.rows_out} rows, {summary.bytes_out / 1e6:.1f} MB); "
          f"dropped: {dropped}; deleted {summary.deleted} old files")
    left = len(live_segments(read_manifest(args.dataset)))
    if not summary.shards and not args.include_partial and left > 1:
        print(f"compact: the segments add up to less than --target-bytes {args.target_bytes}; "
              "add --include-partial to merge them anyway (e.g. once the sink has stopped)")
    return 0


def _register_gc(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
