"""FP8 (``float8_e4m3fn``) hidden states against bf16 and float32, per layer, on real vLLM captures.

The same prompts are captured twice by eaglefeed's connector on the engine tests' 4-layer tiny
Llama (engine float32, every layer id 0..4, greedy, ``--new-tokens`` new tokens, prompts of
random ids 64–1,500 long): once stored as ``float8_e4m3fn``, once as ``float32``. The bf16
reference is the float32 capture rounded to nearest even, which is exactly what the connector's
bf16 store writes from a float32 engine. Per layer, over every position of every file:

* ``row_rel``: the relative error of each position's H values, ``‖x̂ − x‖₂ / ‖x‖₂`` (max, mean);
* ``elem_rel``: ``|x̂ − x| / |x|`` of each element in e4m3's normal range once scaled
  (``|x| ≥ 2⁻⁶ × scale``, scale = the row's largest magnitude / 448; smaller ones are bounded
  absolutely, below) (max, mean);
* ``abs_of_amax``: the largest ``|x̂ − x|`` over its row's largest magnitude.

Also the bytes per token of both stores. Needs ``make engine-env``; about 3 minutes:

    python -m bench.fp8_error                     # 24 prompts, 16 new tokens
    python -m bench.fp8_error --prompts 8 --json-out fp8.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.capture_overhead import NATIVE, prompt_ids, server, tiny_model_4
from eaglefeed.dataset.hidden_states import FP8, check_file, read_header, read_tensor, to_bfloat16, to_float32

LAYERS = (0, 1, 2, 3, 4)  # embeddings, entering each decoder layer, N (before the final norm)
NORMAL = 2.0**-6 / 448  # |x| / its row's amax at e4m3's smallest normal, once scaled


def layer_errors(approx: np.ndarray, exact: np.ndarray, layer_ids: Sequence[int]) -> dict[int, dict[str, float]]:
    """Per layer id, how far ``approx`` ``[T, L, H]`` is from ``exact`` (both float32): see the module doc."""
    out: dict[int, dict[str, float]] = {}
    for index, layer in enumerate(layer_ids):
        x, y = exact[:, index].astype(np.float64), approx[:, index].astype(np.float64)
        err = np.abs(y - x)
        norm = np.linalg.norm(x, axis=-1)
        row = np.linalg.norm(y - x, axis=-1)[norm > 0] / norm[norm > 0]
        amax = np.abs(x).max(axis=-1, keepdims=True)
        normal = (np.abs(x) >= amax * NORMAL) & (np.abs(x) > 0)
        elem = err[normal] / np.abs(x[normal])
        out[layer] = {"row_rel_max": float(row.max()), "row_rel_mean": float(row.mean()),
                      "elem_rel_max": float(elem.max()), "elem_rel_mean": float(elem.mean()),
                      "abs_of_amax": float((err / np.where(amax > 0, amax, 1)).max())}
    return out


def store_errors(pairs: Sequence[tuple[Path, Path]]) -> dict[str, Any]:
    """fp8 vs bf16, fp8 vs float32 and bf16 vs float32 over ``(fp8 file, float32 file)`` pairs."""
    fp8, bf16, exact = [], [], []
    layer_ids: tuple[int, ...] = ()
    for fp8_path, f32_path in pairs:
        ids = read_tensor(f32_path, read_header(f32_path), "token_ids").tolist()
        ref = check_file(f32_path, token_ids=ids, layer_ids=None, dtype="float32")
        low = check_file(fp8_path, token_ids=ids, layer_ids=ref.layer_ids, dtype=FP8)
        header = read_header(fp8_path)
        values = to_float32(read_tensor(fp8_path, header, "hidden_states"), FP8,
                            read_tensor(fp8_path, header, "hidden_states_scales"))
        truth = np.array(read_tensor(f32_path, read_header(f32_path), "hidden_states"))
        fp8.append(values)
        exact.append(truth)
        bf16.append(to_float32(to_bfloat16(truth), "bfloat16"))
        layer_ids = low.layer_ids
    a, b, x = (np.concatenate(parts) for parts in (fp8, bf16, exact))
    return {"positions": int(x.shape[0]), "layers": list(layer_ids), "hidden": int(x.shape[2]),
            "fp8_vs_bf16": layer_errors(a, b, layer_ids), "fp8_vs_float32": layer_errors(a, x, layer_ids),
            "bf16_vs_float32": layer_errors(b, x, layer_ids)}


def describe(result: dict[str, Any]) -> str:
    """The per-layer table (markdown) of :func:`store_errors`."""
    lines = [f"{result['positions']} positions, layers {result['layers']}, hidden {result['hidden']}", "",
             "| layer | fp8 vs bf16: row rel. max / mean | elem. rel. max / mean | fp8 vs fp32: row rel. max / "
             "mean | bf16 vs fp32: row rel. max / mean |", "|---|---|---|---|---|"]
    for layer in result["layers"]:
        a, x, b = (result[k][layer] for k in ("fp8_vs_bf16", "fp8_vs_float32", "bf16_vs_float32"))
        lines.append(f"| {layer} | {a['row_rel_max']:.4f} / {a['row_rel_mean']:.4f} | {a['elem_rel_max']:.4f} / "
                     f"{a['elem_rel_mean']:.4f} | {x['row_rel_max']:.4f} / {x['row_rel_mean']:.4f} | "
                     f"{b['row_rel_max']:.5f} / {b['row_rel_mean']:.5f} |")
    return "\n".join(lines)


def capture(url: str, prompts: list[list[int]], new_tokens: int, store: Path) -> list[Path]:
    """Each prompt once (greedy, states of prompt + output[:-1]); the files, once all exist, in order."""
    def one(item: tuple[int, list[int]]) -> Path:
        body = {"request_id": f"fp8-{item[0]}", "token_ids": item[1],
                "sampling_params": {"max_tokens": new_tokens, "temperature": 0},
                "kv_transfer_params": {"include_output_tokens": True}}
        answer = httpx.post(url + NATIVE, json=body, timeout=600).raise_for_status().json()
        return store / Path(answer["kv_transfer_params"]["hidden_states_path"]).name

    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(one, enumerate(prompts)))
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError("hidden-state files did not appear")
        time.sleep(0.05)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    model = tiny_model_4()
    prompts = prompt_ids(args.prompts, seed=35)
    with tempfile.TemporaryDirectory(prefix="fp8-bench-") as tmp:
        work = Path(tmp)
        files: dict[str, list[Path]] = {}
        for dtype in (FP8, "float32"):  # one server at a time: each takes about 4 GB
            store = work / dtype
            store.mkdir()
            with server(model, work / f"{dtype}.log", None, store, dtype=dtype, layers=LAYERS) as (url, _pgid):
                files[dtype] = capture(url, prompts, args.new_tokens, store)
        result = store_errors(list(zip(files[FP8], files["float32"], strict=True)))
        sizes = {dtype: sum(p.stat().st_size for p in paths) for dtype, paths in files.items()}
    result["bytes_per_token"] = {dtype: size / result["positions"] for dtype, size in sizes.items()}
    values = result["positions"] * len(LAYERS) * result["hidden"]
    result["fp8_over_bf16_bytes"] = sizes[FP8] / (sizes["float32"] - 2 * values)  # bf16: 2 bytes a value
    print(describe(result))
    print(f"bytes per token: fp8 {result['bytes_per_token'][FP8]:.1f}, float32 "
          f"{result['bytes_per_token']['float32']:.1f} (whole files); fp8 / bf16 ≈ {result['fp8_over_bf16_bytes']:.3f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
