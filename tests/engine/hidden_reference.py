"""Check hidden-states files against transformers' own forward pass (run with the engine venv's python).

Reads JSON lines ``{"path": FILE}`` on stdin; prints one JSON line per file with what the file
holds (metadata, shape, dtype, token ids) and how far its states are from transformers' fp32
forward on the file's token ids, per layer:

* ``max_abs``: max |stored - reference| (reference in fp32);
* ``max_abs_rounded``: max |stored - reference rounded to the stored dtype|;
* ``max_ulps``: that difference in units of the stored dtype's spacing at the reference's
  magnitude (0 when the stored dtype is float32);
* ``equal_fraction``: share of elements bit-equal to the rounded reference;
* ``max_excess``: max of |stored - reference| - half a stored-dtype step at that element's
  magnitude: a value stored by rounding an engine value v to the stored dtype is within half a
  step of v, so this is at most |v - reference| (0 when the stored dtype is float32);
* ``max_abs_configured_order``: max |stored - reference| when the file's layer axis is read in
  the order the test configured (``"configured"`` in the request), to show the order matters.

vLLM layer id k < N is ``outputs.hidden_states[k]`` (k = 0: embeddings; k: the residual stream
entering decoder layer k); k = N is the last decoder layer's output before the final norm, taken
by a forward hook (transformers' ``hidden_states[N]`` is after the norm).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, PreTrainedModel


def load(model_dir: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def reference_states(model: PreTrainedModel, token_ids: list[int], layer_ids: list[int]) -> torch.Tensor:
    """fp32 states ``[T, len(layer_ids), H]`` in the given layer order."""
    n = model.config.num_hidden_layers
    captured: list[torch.Tensor] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    handle = model.model.layers[n - 1].register_forward_hook(hook)
    try:
        with torch.inference_mode():
            ids = torch.tensor([token_ids], dtype=torch.long)
            out = model(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    finally:
        handle.remove()
    assert len(captured) == 1
    rows = [captured[0][0] if k == n else out.hidden_states[k][0] for k in layer_ids]
    return torch.stack(rows, dim=1).float()


def spacing(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The stored dtype's spacing (one ulp) at each value's magnitude."""
    info = torch.finfo(dtype)
    magnitude = values.abs().clamp_min(info.smallest_normal)
    exponent = torch.floor(torch.log2(magnitude))
    return torch.exp2(exponent - _mantissa_bits(dtype))


def _mantissa_bits(dtype: torch.dtype) -> int:
    return {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[dtype]


def check(model: PreTrainedModel, request: dict[str, Any]) -> dict[str, Any]:
    with safe_open(request["path"], framework="pt") as handle:
        metadata = handle.metadata() or {}
        hidden = handle.get_tensor("hidden_states")
        token_ids = handle.get_tensor("token_ids")
        keys = sorted(handle.keys())
    layer_ids = json.loads(metadata.get("layer_ids", "[]"))
    result: dict[str, Any] = {"path": request["path"], "metadata": metadata, "keys": keys,
                              "shape": list(hidden.shape), "dtype": str(hidden.dtype).removeprefix("torch."),
                              "token_ids_dtype": str(token_ids.dtype).removeprefix("torch."),
                              "token_ids": token_ids.tolist()}
    if hidden.dim() != 3 or hidden.shape[1] != len(layer_ids) or hidden.shape[0] != token_ids.shape[0]:
        return result
    ref = reference_states(model, token_ids.tolist(), layer_ids)
    stored = hidden.float()
    rounded = ref.to(hidden.dtype).float()
    diff = (stored - ref).abs()
    diff_rounded = (stored - rounded).abs()
    if hidden.dtype == torch.float32:
        ulps = torch.zeros_like(diff)
        excess = torch.zeros_like(diff)
    else:
        ulps = diff_rounded / spacing(ref, hidden.dtype)
        excess = diff - 0.5 * spacing(torch.maximum(stored.abs(), ref.abs()), hidden.dtype)
    result["layers"] = {
        str(k): {"max_abs": diff[:, i].max().item(), "max_abs_rounded": diff_rounded[:, i].max().item(),
                 "max_ulps": ulps[:, i].max().item(), "max_excess": excess[:, i].max().item(),
                 "equal_fraction": (stored[:, i] == rounded[:, i]).float().mean().item(),
                 "max_ref": ref[:, i].abs().max().item()}
        for i, k in enumerate(layer_ids)
    }
    configured = request.get("configured")
    if configured and sorted(configured) == layer_ids:
        ref_configured = reference_states(model, token_ids.tolist(), configured)
        result["max_abs_configured_order"] = (stored - ref_configured).abs().max().item()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.model_dir)
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(check(model, json.loads(line))) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
