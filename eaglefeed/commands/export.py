"""``eaglefeed export``: JSONL that SpecForge (data.prompts_path) and speculators (prepare_data.py) read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eaglefeed.commands._common import add_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "export", "write the dataset as JSONL with input_ids, loss_mask, id and seq_len "
                                   "for SpecForge or speculators (streamed: constant memory)")
    p.add_argument("dataset", type=Path, help="dataset directory (the sink's --output)")
    p.add_argument("--format", required=True, choices=["specforge", "speculators"], dest="fmt",
                   help="specforge: data.prompts_path; speculators: prepare_data.py --data")
    p.add_argument("--out", required=True, help="output .jsonl file, or - for stdout")
    p.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from dataset import export

    out = None if args.out == "-" else Path(args.out)
    if out is not None:
        from eaglefeed.paths import check_writable_file
        check_writable_file(out, "--out")
    summary = export(args.dataset, fmt=args.fmt, out=out)
    print(f"export: {summary.rows} rows, {summary.tokens} tokens ({summary.loss_tokens} loss tokens), "
          f"{summary.bytes / 1e6:.1f} MB → {args.out}", file=sys.stderr if out is None else sys.stdout)
    return 0
