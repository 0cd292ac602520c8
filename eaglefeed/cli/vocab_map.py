"""``eaglefeed vocab-map``: the draft-vocabulary file SpecForge or speculators loads, from token counts."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from eaglefeed.cli._common import add_allow_mixed, add_command, add_dataset_arg, dataset_dir


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "vocab-map", "write an EAGLE-3 draft-vocabulary mapping (the N most frequent "
                                      "generated token ids) in the file format SpecForge or speculators "
                                      "loads")
    add_dataset_arg(p)
    p.add_argument("--format", required=True, choices=["specforge", "speculators", "token-freq"], dest="fmt",
                   help="specforge: FILE.pt for model.vocab_mapping_path (needs torch); speculators: a "
                        "folder that gets d2t-N.npy and t2d-N.npy (speculators train --d2t-path/--t2d-path, "
                        "or found in its data path); token-freq: speculators' token_freq.pt (needs torch)")
    p.add_argument("--draft-vocab-size", type=int, default=None, metavar="N",
                   help="draft vocabulary size (the draft config's draft_vocab_size, e.g. 32000); required "
                        "for --format specforge and speculators")
    p.add_argument("--target-vocab-size", type=int, default=None, metavar="V",
                   help="the target model's vocab_size (its config.json), the length of t2d; required for "
                        "--format specforge and speculators")
    p.add_argument("--out", required=True, type=Path, help="output file (specforge, token-freq) or folder "
                                                           "(speculators)")
    add_allow_mixed(p)
    p.set_defaults(run=_run_vocab_map)


def _run_vocab_map(args: argparse.Namespace) -> int:
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.core.errors import ConfigError
    from eaglefeed.dataset import (
        draft_vocab,
        snapshot_counts,
        write_specforge,
        write_speculators,
        write_token_freq,
    )

    missing = [flag for flag, value in (("--draft-vocab-size N (the draft config's draft_vocab_size)",
                                         args.draft_vocab_size),
                                        ("--target-vocab-size V (the target config's vocab_size)",
                                         args.target_vocab_size)) if value is None]
    if args.fmt != "token-freq" and missing:
        raise ConfigError(f"vocab-map --format {args.fmt} needs {' and '.join(missing)}")
    if args.fmt in ("specforge", "token-freq") and importlib.util.find_spec("torch") is None:
        raise ConfigError(f"vocab-map --format {args.fmt} writes a torch file and needs torch: pip install "
                          "torch (from a clone: pip install -e '.[torch]'); --format speculators needs none")
    # (reads every file's counts: only once the flags are known good)
    counts = snapshot_counts(args.dataset, allow_mixed=args.allow_mixed)
    counter = counts.counter
    ids, freqs = counter.sparse()
    source = f"{counts.from_sidecars} files' token counts" + (
        f", {len(counts.rescanned)} files without counts read again" if counts.rescanned else "")
    print(f"vocab-map: {counter.total} loss tokens in {counts.rows} rows, {ids.size} distinct ids ({source})")
    if args.fmt == "token-freq":
        written = write_token_freq(ids, freqs, args.out)
    else:
        draft = draft_vocab(counter.counts, draft_size=args.draft_vocab_size,
                            target_size=args.target_vocab_size)
        write = write_specforge if args.fmt == "specforge" else write_speculators
        written = write(draft, args.out)
        print(f"vocab-map: the {args.draft_vocab_size} draft ids cover {100 * draft.coverage:.2f}% of the "
              f"loss tokens (target vocab {args.target_vocab_size})")
    print("vocab-map: wrote " + ", ".join(str(p) for p in written))
    return 0
