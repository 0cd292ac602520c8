"""``eaglefeed stats``: rows, tokens, finish reasons, length histograms and flags of a dataset."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eaglefeed.cli._common import add_allow_mixed, add_command, add_dataset_arg, dataset_dir


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "stats", "summarise a dataset: rows, tokens, finish-reason mix, length histograms, "
                                  "reasoning and tool-call shares, duplicates dropped")
    add_dataset_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="draw the length histograms and the finish-reason mix (needs matplotlib)")
    p.add_argument("--files", action="store_true",
                   help="only list the live Parquet files, one per line (for load_dataset(data_files=...) "
                        "while a sink or compaction is writing: a directory listing may hold extra files)")
    add_allow_mixed(p)
    p.set_defaults(run=_run_stats)


def _run_stats(args: argparse.Namespace) -> int:
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.core.paths import check_writable_file
    from eaglefeed.dataset import compute_stats, plot, render, snapshot

    if args.files:
        with snapshot(args.dataset) as files:
            print("\n".join(str(f) for f in files))
        return 0
    if args.plot:
        check_writable_file(args.plot, "--plot")
    stats = compute_stats(args.dataset, allow_mixed=args.allow_mixed)
    print(json.dumps(stats.as_dict(), indent=2) if args.json else render(stats))
    if args.plot:
        plot(stats, args.plot)
        if not args.json:
            print(f"plot: {args.plot}")
    return 0
