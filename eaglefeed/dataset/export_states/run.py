"""One hidden-state export: refuse a used folder, check the rows, write the layout staged, move it in."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset.export_states.final_norm import FinalNorm
from eaglefeed.dataset.export_states.rows import StateRow, check_rows, lane_rows_of, read_rows
from eaglefeed.dataset.export_states.specforge_layout import specforge_needs, write_specforge
from eaglefeed.dataset.export_states.speculators_layout import write_speculators
from eaglefeed.dataset.export_states.summary import StatesSummary
from eaglefeed.dataset.hidden_states import STORE
from eaglefeed.dataset.lengths import LengthCut

FORMATS = ("specforge", "speculators")


def export_states(root: Path, files: list[Path], *, fmt: str, folder: Path, max_length: int | None = None,
                  policy: str | None = None, skip_missing: bool = False,
                  final_norm: Path | None = None, lanes: bool = False) -> StatesSummary:
    """Write the states of the live rows in ``files`` (a snapshot of ``root``) in ``fmt``'s layout.

    Each row's store file (``eaglefeed.dataset.hidden_states``) holds ``[T, L, H]``; the row and its
    states are written for the positions that have a state (``rows.kept_length``), in speculators'
    layout (``speculators_layout``) or SpecForge's (``specforge_layout``, which needs torch and
    ``final_norm``). With ``lanes`` each ``tokens`` conversation lane is one row, as
    ``load(..., lanes=True)`` gives it: its final turn's ids, a mask of 1 on every turn's generated
    ids, and its turns' files joined (the cut applies to the joined row).

    Args:
        root: the dataset directory (references are relative to it).
        files: its live segments (``eaglefeed.dataset.snapshot``), in export order.
        fmt: ``speculators`` or ``specforge``.
        folder: the folder the token export is written to: speculators' dataset goes into it
            and its ``hidden_states/``; SpecForge's files into ``folder/hidden_states/``.
        max_length: with ``policy``, the same cut the token export makes.
        policy: ``drop`` or ``truncate`` (``error`` is refused before anything is written).
        skip_missing: leave rows without states out (counted) instead of stopping.
        final_norm: SpecForge: the target model's folder, whose final RMSNorm is applied to layer N.
        lanes: each lane as one row (without it, a lane's later turns are refused: their files
            hold only the positions the earlier turns' do not).

    Raises:
        ConfigError: SpecForge without ``final_norm``, or without torch; the output is there already.
        DatasetError: rows without states (naming the count), layers unlike across rows, no
            layer N, or a file that cannot be read. Nothing is left in ``folder`` then.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown hidden-state format {fmt!r}; one of {list(FORMATS)}")
    target = folder / STORE
    _refuse_used(folder, fmt)
    summary = StatesSummary(fmt=fmt, folder=folder if fmt == "speculators" else target)
    joined = lane_rows_of(root, files) if lanes else None  # read once: checked, then written

    def rows(states_only: bool = False) -> Iterator[StateRow]:
        return iter(joined) if joined is not None else read_rows(files, states_only=states_only)

    layers, last = check_rows(root, rows(states_only=True), skip_missing, summary)
    torch: Any = None
    norm: FinalNorm | None = None
    if fmt == "specforge":
        torch, norm = specforge_needs(final_norm)
    summary.last_layer = last
    summary.aux_layers = tuple(x for x in layers if x != last)
    cut = LengthCut(max_length=max_length, policy=policy) if max_length is not None and policy else None
    staging = folder / f".{STORE}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / STORE).mkdir(parents=True)
    try:
        if fmt == "speculators":
            write_speculators(root, rows(), staging, cut, summary)
            for name in ("data-00000-of-00001.arrow", "dataset_info.json", "state.json"):
                os.replace(staging / name, folder / name)
        else:
            assert norm is not None
            write_specforge(root, rows(), staging / STORE, cut, summary, torch, norm, layers.index(last))
        os.replace(staging / STORE, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def _refuse_used(folder: Path, fmt: str) -> None:
    """A ``ConfigError`` when ``folder`` holds a layout already: an export writes a new one."""
    target = folder / STORE
    taken = [target] if fmt == "specforge" else [target, folder / "state.json", folder / "dataset_info.json",
                                                 *sorted(folder.glob("data-*.arrow"))]
    for path in taken:
        if path.exists():
            raise ConfigError(f"{path} exists: export --hidden-states writes a new layout; give --out a file "
                              "in a folder of its own")
