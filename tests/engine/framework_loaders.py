"""Run by .venv-engine's Python (torch, SpecForge, speculators): load our files with the frameworks' code.

Usage: ``python framework_loaders.py COMMAND ARGS...``; prints one JSON object. Commands:
  specforge-vocab FILE N V PARQUET_DIR   SpecForge's loader on FILE, and SpecForge's own builder
                                         (generate_vocab_mapping_file) on the Parquet rows to compare
                                         (O(N x V) in Python: keep the sizes small); without
                                         PARQUET_DIR only the loader
  speculators-vocab DIR N TOKEN_FREQ V   speculators' npy loader on DIR/d2t-N.npy, t2d-N.npy, and its
                                         builder on TOKEN_FREQ (a token_freq.pt) to compare
  token-freq A B                         two token_freq.pt files, loaded as speculators does
  arrow DIR                              the rows of a prepare-data output (load_from_disk)
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter

import torch


def specforge_vocab(path: str, draft: int, target: int, parquet_dir: str | None) -> dict:
    from datasets import load_dataset
    from specforge.core.compact_teacher import validate_vocab_mapping_consistency
    from specforge.data.preprocessing import generate_vocab_mapping_file
    from specforge.modeling.draft.base import Eagle3DraftModel

    class Buffers:  # the draft model's two buffers, as SpecForge's Llama EAGLE-3 draft creates them
        t2d = torch.ones(target, dtype=torch.bool)
        d2t = torch.zeros(draft, dtype=torch.int64)

    ours = Buffers()
    Eagle3DraftModel.load_vocab_mapping(ours, path)  # SpecForge's loader: torch.load + copy_ into buffers
    validate_vocab_mapping_consistency(ours.t2d, ours.d2t)
    if parquet_dir is None:
        return {"loaded": True}
    rows = load_dataset("parquet", data_files=f"{parquet_dir}/*.parquet", split="train")
    rows = rows.select_columns(["input_ids", "loss_mask"]).with_format("torch")
    with tempfile.TemporaryDirectory() as cache:
        theirs = torch.load(generate_vocab_mapping_file(rows, target, draft, cache_dir=cache))
    counts: Counter[int] = Counter()
    for ids, mask in zip(rows["input_ids"], rows["loss_mask"], strict=True):
        counts.update(ids[mask == 1].tolist())
    ours_ids = torch.nonzero(ours.t2d).flatten().tolist()
    theirs_ids = torch.nonzero(theirs["t2d"]).flatten().tolist()
    boundary = min(counts[t] for t in ours_ids)
    return {
        "loaded": True, "d2t_dtype": str(ours.d2t.dtype), "t2d_dtype": str(ours.t2d.dtype),
        # ties at the last count may be broken differently (SpecForge keeps first-seen order)
        "same_counts": sorted(counts[t] for t in ours_ids) == sorted(counts[t] for t in theirs_ids),
        "same_above_boundary": ({t for t in ours_ids if counts[t] > boundary}
                                == {t for t in theirs_ids if counts[t] > boundary}),
        "identical": ours_ids == theirs_ids,
    }


def speculators_vocab(folder: str, draft: int, token_freq: str, target: int) -> dict:
    from speculators.train.cli import _load_mappings
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    d2t, t2d, size = _load_mappings(f"{folder}/d2t-{draft}.npy", f"{folder}/t2d-{draft}.npy", draft)
    theirs_d2t, theirs_t2d = build_vocab_mappings_from_distribution(
        torch.load(token_freq, weights_only=True), draft, target)
    return {"size": size, "d2t_equal": bool(torch.equal(d2t, theirs_d2t)),
            "t2d_equal": bool(torch.equal(t2d, theirs_t2d))}


def token_freq(a: str, b: str) -> dict:
    first, second = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return {"equal": first == second, "total": sum(first.values()), "ids": len(first)}


def arrow(folder: str) -> dict:
    from datasets import load_from_disk

    data = load_from_disk(folder).with_format(None)
    rows = [{"input_ids": r["input_ids"], "loss_mask": r["loss_mask"], "seq_len": r["seq_len"]} for r in data]
    return {"columns": sorted(data.column_names), "rows": rows}


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "specforge-vocab":
        result = specforge_vocab(args[0], int(args[1]), int(args[2]), args[3] if len(args) > 3 else None)
    elif command == "speculators-vocab":
        result = speculators_vocab(args[0], int(args[1]), args[2], int(args[3]))
    elif command == "token-freq":
        result = token_freq(args[0], args[1])
    else:
        result = arrow(args[0])
    print(json.dumps(result))
