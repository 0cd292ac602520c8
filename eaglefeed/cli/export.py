"""``eaglefeed export``: JSONL that SpecForge (data.prompts_path) and speculators (prepare-data) read."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from eaglefeed.cli._common import add_allow_mixed, add_command, add_dataset_arg, dataset_dir
from eaglefeed.core.errors import ConfigError

log = logging.getLogger("eaglefeed.export")

_OWN = {"manifest.jsonl", "segments", "hidden_states"}
"""What the sink, compaction and capture write at a dataset's top level (besides its dot-files)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "export", "write the dataset as JSONL with input_ids, loss_mask, id and seq_len "
                                   "for SpecForge or speculators (streamed: constant memory)")
    add_dataset_arg(p)
    p.add_argument("--format", required=True, choices=["specforge", "speculators"], dest="fmt",
                   help="specforge: data.prompts_path; speculators: prepare-data --data")
    p.add_argument("--out", required=True,
                   help="output .jsonl file, or - for stdout (for speculators, put it in a folder of its own "
                        "or pass the file itself to --data: a folder with manifest.jsonl in it fails)")
    p.add_argument("--force", action="store_true",
                   help="write --out even inside the dataset folder or over an existing file (never "
                        "over the dataset's own files)")
    p.add_argument("--max-length", type=int, default=None, metavar="L",
                   help="longest row to write whole (the framework's max_length / --seq-length); "
                        "needs --length-policy")
    p.add_argument("--length-policy", choices=["drop", "truncate", "error"], default=None,
                   help="rows longer than --max-length (default: the format's own default, 2048 for "
                        "specforge, 8192 for speculators): drop them, truncate them (the mask alike; a row "
                        "left with no loss token is dropped), or stop without writing anything")
    p.add_argument("--hidden-states", action="store_true",
                   help="also write the rows' captured states in the format's offline layout, in --out's "
                        "folder: speculators: the prepared dataset itself (--data-path that folder; "
                        "hs_{i}.safetensors hard-linked), specforge: hidden_states/rows_*/data_*.ckpt "
                        "(data.hidden_states_path; needs torch and --final-norm). Layer N (vLLM's, before "
                        "the final norm) must be among the captured layers; the others are the auxiliary")
    p.add_argument("--lanes", action="store_true",
                   help="each tokens conversation lane as one row, as eaglefeed.load(DIR, "
                        "hidden_states=True, lanes=True) gives it: its final turn's ids, loss_mask 1 on "
                        "every turn's generated ids, and with --hidden-states the states joined from its "
                        "turns' files (each turn stores only the positions the earlier ones do not); "
                        "--max-length cuts the joined row. Default: one row per turn, as load() without "
                        "lanes (then --hidden-states stops at a lane's later turns: their files hold only "
                        "part of the span)")
    p.add_argument("--skip-missing-states", action="store_true",
                   help="with --hidden-states: leave rows without states out (default: stop, naming the "
                        "count)")
    p.add_argument("--final-norm", type=Path, default=None, metavar="MODEL_DIR",
                   help="with --hidden-states --format specforge: the target model's folder (config.json, "
                        "safetensors), whose final RMSNorm turns layer N into SpecForge's hidden_state")
    add_allow_mixed(p)
    p.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.dataset import export
    from eaglefeed.dataset.lengths import FRAMEWORK_FLAG, FRAMEWORK_MAX_LENGTH

    max_length = args.max_length
    if max_length is not None and args.length_policy is None:
        raise ConfigError("--max-length needs --length-policy drop, truncate or error")
    if max_length is None and args.length_policy is not None:
        max_length = FRAMEWORK_MAX_LENGTH[args.fmt]
    if max_length is not None and max_length < 1:
        raise ConfigError(f"--max-length must be positive, got {max_length}")
    out = None if args.out == "-" else Path(args.out)
    if out is not None:
        from eaglefeed.core.paths import check_writable_file
        check_writable_file(out, "--out")
        _refuse_overwrite(out, args.dataset, force=args.force)
    states = None
    if args.hidden_states:
        if out is None:
            raise ConfigError("--hidden-states writes files beside --out: give a file, not -")
        states = {"skip_missing": args.skip_missing_states, "final_norm": args.final_norm}
    elif args.skip_missing_states or args.final_norm is not None:
        raise ConfigError("--skip-missing-states and --final-norm go with --hidden-states")
    summary = export(args.dataset, fmt=args.fmt, out=out, max_length=max_length, policy=args.length_policy,
                     hidden_states=states, allow_mixed=args.allow_mixed, lanes=args.lanes)
    stream = sys.stderr if out is None else sys.stdout
    print(f"export: {summary.rows} rows, {summary.tokens} tokens ({summary.loss_tokens} loss tokens), "
          f"{summary.bytes / 1e6:.1f} MB → {args.out}", file=stream)
    if args.lanes:
        print(f"export: {summary.lanes} of the rows are conversation lanes of several turns, one row each",
              file=stream)
    if summary.cut is not None:
        print(f"export: {summary.cut.describe()}", file=stream)
    if summary.states is not None:
        print(f"export: {summary.states.describe()}", file=stream)
    framework = summary.framework
    if framework is not None and framework.over:
        log.warning("%d rows are longer than %s's default %s %d: it will truncate them, cutting %d loss "
                    "tokens, and silently drop the %d rows left with no loss token (%d loss tokens). "
                    "Choose with --max-length L --length-policy drop|truncate|error (lengths: eaglefeed "
                    "stats), and give %s the same L.", framework.over, args.fmt, FRAMEWORK_FLAG[args.fmt],
                    framework.max_length, framework.cut_loss_tokens, framework.dropped_rows,
                    framework.dropped_loss_tokens, FRAMEWORK_FLAG[args.fmt])
    return 0


def _refuse_overwrite(out: Path, dataset: Path, *, force: bool) -> None:
    """One line instead of an export over the dataset or an existing file (``--force``: but its own files)."""
    root, target = dataset.resolve(), out.resolve()
    if target.is_relative_to(root) and (root / "manifest.jsonl").is_file():  # else: "not a dataset"
        top = target.relative_to(root).parts[0]  # the manifest, segments/, hidden_states/, the locks
        if top in _OWN or top.startswith("."):
            raise ConfigError(f"--out {out} is one of the dataset's own files: export elsewhere")
        if not force:
            raise ConfigError(f"--out {out} is inside the dataset {dataset}: export elsewhere, or pass "
                              "--force to write it there")
    if target.exists() and not force:
        raise ConfigError(f"--out {out} exists: pass --force to overwrite it")
