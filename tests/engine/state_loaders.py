"""Run by .venv-engine's Python: the frameworks' own offline loaders on ``export --hidden-states``.

Usage: ``python state_loaders.py [--lanes] COMMAND DATASET EXPORT [MODEL_DIR]``; prints one JSON object.
  speculators DATASET FOLDER          speculators.train.data.ArrowDataset(datapath=FOLDER)[i] for every
                                      row (its file reader hs_connectors.FileTransfer, FP8Transfer for
                                      fp8 rows, and its check
                                      speculators.data_generation.offline.check_hidden_states)
  specforge DATASET FOLDER MODEL_DIR  SpecForge's OfflineManifestReader over FOLDER, load_feature_file
                                      and normalize_offline_sample for every file
Every tensor is compared with the row's own (``eaglefeed.load(DATASET, hidden_states=True)``;
with ``--lanes``, ``lanes=True``: a conversation lane is one row, its turns' states joined) in
the stored dtype: ``equal`` counts exact matches. fp8 rows are bf16 on both sides; speculators
scales in bf16 arithmetic and eaglefeed in float32 (rounded once), so there they are compared
within 2⁻⁷ relative (``max_rel`` the largest difference over the row's magnitude). SpecForge's
target (layer N after the final norm) is compared with transformers' LlamaRMSNorm over our layer
N as well.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import torch

import eaglefeed

LANES = "--lanes" in sys.argv


def ours(dataset: str) -> dict[tuple[int, ...], dict]:
    """Our rows by their ids without the last (the ids that have states)."""
    rows = {}
    for row in eaglefeed.load(dataset, hidden_states=True, lanes=LANES):
        states = row["hidden_states"]
        if states is not None:
            ids = list(row["input_ids"])
            refs = getattr(states, "refs", None) or (states.ref,)  # a lane's files, or the row's one
            rows[tuple(ids[:-1])] = {"ids": ids, "mask": list(row["loss_mask"]), "states": states.torch(),
                                     "layers": states.layer_ids, "dtype": refs[0].dtype,
                                     "turns": row.get("turns", 1)}
    return rows


def find(rows: dict[tuple[int, ...], dict], ids: list[int]) -> dict:
    (row,) = [r for key, r in rows.items() if key[:len(ids)] == tuple(ids)]
    return row


def same(theirs: torch.Tensor, mine: torch.Tensor, fp8: bool) -> bool:
    if not fp8:
        return bool(torch.equal(theirs, mine))
    close = torch.allclose(theirs.float(), mine.float(), rtol=2**-7, atol=0)
    return theirs.dtype == mine.dtype and bool(close)


def speculators(dataset: str, folder: str) -> dict:
    from pathlib import Path

    from hs_connectors.transfer import FP8Transfer
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    rows = ours(dataset)
    fp8 = any(row["dtype"] == "float8_e4m3fn" for row in rows.values())
    transfer = FP8Transfer(Path(folder) / "hidden_states") if fp8 else None  # --hidden-states-backend fp8
    data = ArrowDataset(max_len=4096, datapath=folder, on_missing="raise", transfer=transfer)
    max_rel = 0.0
    checks = []
    for i in range(len(data)):
        sample = data[i]  # BaseDataset.__getitem__ -> ArrowDataset._get_raw_data (the cached file)
        ids = sample["input_ids"].tolist()
        row = find(rows, ids)
        kept = len(ids)
        states = row["states"][:kept]
        check_hidden_states(data.transfer.get_cached(i), data.data[i]["input_ids"].tolist())
        checks.append({
            "ids": ids == row["ids"][:kept],
            "loss_mask": sample["loss_mask"].tolist() == row["mask"][:kept],
            "aux": same(sample["hidden_states"], states[:, :-1].flatten(1), fp8),
            "last": same(sample["verifier_last_hidden_states"], states[:, -1], fp8),
            "dtype": str(sample["hidden_states"].dtype),
            "lengths": sample["lengths"].tolist() == [kept],
            **({"turns": row["turns"]} if LANES else {}),
        })
        diff = (sample["hidden_states"].float() - states[:, :-1].flatten(1).float()).abs().max()
        max_rel = max(max_rel, float(diff / states.float().abs().max()))
    return {"version": version("speculators"), "rows": len(data), "checks": checks, "max_rel": max_rel}


def specforge(dataset: str, folder: str, model: str) -> dict:
    from safetensors.torch import load_file
    from specforge.algorithms.eagle3.data import normalize_offline_sample
    from specforge.runtime.data_plane.feature_store import load_feature_file
    from specforge.runtime.data_plane.offline_reader import OfflineManifestReader
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    config = json.load(open(f"{model}/config.json"))
    norm = LlamaRMSNorm(config["hidden_size"], eps=config["rms_norm_eps"])
    norm.weight.data = load_file(f"{model}/model.safetensors")["model.norm.weight"]
    rows = ours(dataset)
    refs = OfflineManifestReader(folder).read()
    checks = []
    for ref in refs:
        raw = load_feature_file(ref.feature_store_uri.removeprefix("file://"))
        sample = normalize_offline_sample(raw, max_len=4096)
        ids = raw["input_ids"].tolist()
        row = find(rows, ids)
        kept = len(ids)
        states = row["states"][:kept]
        last = row["layers"].index(config["num_hidden_layers"])
        aux = [k for k in range(len(row["layers"])) if k != last]
        with torch.no_grad():
            reference = norm(states[:, last])
        mask = row["mask"][:kept]
        mask[-1] = 0  # SpecForge's own rule: the last position has no target
        checks.append({
            "shapes": [list(raw["hidden_state"].shape), list(raw["aux_hidden_state"].shape)],
            "ids": ids == row["ids"][:kept] and sample["input_ids"].tolist() == [ids],
            "loss_mask": sample["loss_mask"].tolist() == [mask],
            "aux": bool(torch.equal(sample["hidden_state"][0], torch.cat([states[:, k] for k in aux], -1))),
            "dtype": str(sample["target"].dtype),
            "target_equal_rmsnorm": bool(torch.equal(sample["target"][0], reference)),
            "target_max_diff": float((sample["target"][0].float() - reference.float()).abs().max()),
            "target_scale": float(reference.float().abs().max()),
            **({"turns": row["turns"]} if LANES else {}),
        })
    return {"version": version("specforge"), "rows": len(refs), "checks": checks}


if __name__ == "__main__":
    command, *args = [arg for arg in sys.argv[1:] if arg != "--lanes"]
    result = speculators(*args) if command == "speculators" else specforge(*args)
    print(json.dumps(result))
