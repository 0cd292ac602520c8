"""SpecForge's offline layout: one ``torch.save`` ``.ckpt`` per row, in ``rows_<start>-<end>/`` folders."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset.export_states.final_norm import FinalNorm
from eaglefeed.dataset.export_states.rows import StateRow, kept_length, row_states
from eaglefeed.dataset.export_states.summary import StatesSummary
from eaglefeed.dataset.lengths import LengthCut

SPECFORGE_GROUP = 2000
"""Files per ``rows_<start>-<end>/`` folder, as SpecForge's preparation script groups them."""
TORCH_HINT = ("export --hidden-states --format specforge writes torch .ckpt files and needs torch: "
              "pip install torch")


def specforge_needs(final_norm: Path | None) -> tuple[Any, FinalNorm]:
    """Torch (imported only here) and the target model's final norm, which SpecForge's layout needs.

    Raises:
        ConfigError: no torch, or no ``final_norm`` folder (or one whose norm cannot be read).
    """
    torch = _torch()
    if final_norm is None:
        raise ConfigError(
            "SpecForge's offline target head is the lm_head alone, so its hidden_state must be after "
            "the final norm, and vLLM's layer N is before it: pass --final-norm MODEL_DIR (the target "
            "model's folder: config.json and safetensors weights)")
    return torch, FinalNorm.from_model(final_norm)


def write_specforge(root: Path, rows: Iterable[StateRow], staging: Path, cut: LengthCut | None,
                    summary: StatesSummary, torch: Any, norm: FinalNorm, last_index: int) -> None:
    """Write SpecForge 0.2's layout of ``rows`` into ``staging``.

    ``specforge.runtime.data_plane.offline_reader`` (``data.hidden_states_path``) reads every
    ``*.ckpt`` under a folder, each a ``torch.save`` dict of ``input_ids`` ``[T']`` and
    ``loss_mask`` ``[T']`` (int64), ``hidden_state`` ``[1, T', H]`` and ``aux_hidden_state``
    ``[1, T', A*H]`` (the A auxiliary layers concatenated on the hidden axis, ascending), in
    ``rows_<start>-<end>/data_<i>.ckpt`` as its ``prepare_hidden_states.py`` writes them. Its target
    head is the lm_head alone (``specforge/modeling/target/target_head.py``): ``hidden_state`` must
    be *after* the final norm, so ``norm`` (the target model's final RMSNorm) is applied to layer N,
    at ``last_index`` among the row's layers. fp8 rows are written dequantized, as bfloat16. A lane
    is one file of its joined states.
    """
    aux = [i for i in range(len(summary.aux_layers) + 1) if i != last_index]
    for row in rows:
        if row.ref is None:
            continue
        kept = kept_length(row, cut, summary)
        if kept == 0:
            continue
        states, dtype = row_states(root, row, kept)  # fp8 as bf16: SpecForge reads no scales
        hidden = row.ref.shape[2]
        index = summary.rows
        start = index // SPECFORGE_GROUP * SPECFORGE_GROUP
        group = staging / f"rows_{start}-{start + SPECFORGE_GROUP}"
        group.mkdir(exist_ok=True)
        record = {
            "input_ids": torch.from_numpy(np.array(row.input_ids[:kept], np.int64)),
            "loss_mask": torch.from_numpy(np.array(row.loss_mask[:kept], np.int64)),
            "hidden_state": _tensor(torch, norm.apply(states[:, last_index], dtype), dtype)
            .reshape(1, kept, hidden),
            "aux_hidden_state": _tensor(torch, np.ascontiguousarray(states[:, aux]), dtype)
            .reshape(1, kept, len(aux) * hidden),
        }
        torch.save(record, group / f"data_{index}.ckpt")
        summary.rows += 1
        summary.rewritten += 1
        summary.lanes += int(len(row.refs) > 1)
        summary.positions += kept


def _torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # optional: trainers have it
    except ImportError as exc:
        raise ConfigError(TORCH_HINT) from exc
    return torch


def _tensor(torch: Any, array: np.ndarray, dtype: str) -> Any:
    tensor = torch.from_numpy(np.array(array))  # a copy: the source is a read-only map
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor
