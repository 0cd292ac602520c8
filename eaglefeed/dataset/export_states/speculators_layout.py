"""speculators' offline layout: a ``datasets`` folder and one ``hs_{i}.safetensors`` per row."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.export_states.rows import StateRow, kept_length
from eaglefeed.dataset.export_states.summary import StatesSummary
from eaglefeed.dataset.hidden_states import FP8, STORE, HiddenStatesError, read_header
from eaglefeed.dataset.lengths import LengthCut
from eaglefeed.dataset.state_files.write import write_positions, write_raw


def write_speculators(root: Path, rows: Iterable[StateRow], staging: Path, cut: LengthCut | None,
                      summary: StatesSummary) -> None:
    """Write speculators 0.9's layout of ``rows`` into ``staging``.

    ``speculators.train.data.ArrowDataset``'s ``--data-path DIR`` is a ``datasets``
    ``save_to_disk`` folder (``input_ids``, ``loss_mask``, ``seq_len``, torch format) and
    ``DIR/hidden_states/hs_{i}.safetensors`` for its row ``i`` (``hs_connectors.FileTransfer``),
    with ``token_ids`` equal to the row's ``input_ids`` and ``hidden_states`` ``[T', L, H]`` whose
    last layer is the verifier's last state (speculators applies the verifier's norm itself) and
    whose others are the auxiliary layers. That is our file as it is: it is hard-linked (copied
    across file systems) unless a cut makes it shorter. An fp8 file is speculators' FP8 file too
    (``hidden_states`` e4m3 and ``hidden_states_scales``, which its ``FP8Transfer`` broadcasts:
    ``[T, L, 1]`` here, one scale per position and layer), read by training with
    ``--hidden-states-backend fp8``; it is linked as it is. A lane of several turns is one file
    written anew: its turns' raw values joined (fp8: codes and scales, exact).
    """
    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    lengths: list[int] = []
    for row in rows:
        if row.ref is None:
            continue
        kept = kept_length(row, cut, summary)
        if kept == 0:
            continue
        source = Path(root) / row.ref.uri
        dest = staging / STORE / f"hs_{summary.rows}.safetensors"
        if len(row.refs) > 1:
            _write_lane(root, row, dest, kept)
            summary.lanes += 1
            summary.rewritten += 1
        elif kept == row.ref.shape[0]:
            _link(source, dest)
            summary.linked += 1
        else:  # the raw values cut (an fp8 file keeps its codes and scales)
            write_positions(source, dest, slice(0, kept))
            summary.rewritten += 1
        ids.append(np.asarray(row.input_ids[:kept], np.int64))
        masks.append(np.asarray(row.loss_mask[:kept], np.int64))
        lengths.append(kept)
        summary.rows += 1
        summary.positions += kept
    _write_arrow_dataset(staging, ids, masks, lengths)
    if summary.dtype == FP8:
        summary.notes.append("fp8 states: train with speculators' --hidden-states-backend fp8 (its "
                             "FP8Transfer applies the scales)")


def _write_lane(root: Path, row: StateRow, dest: Path, kept: int) -> None:
    """The lane's first ``kept`` positions as one file from 0: its turns' raw values joined, ids the row's."""
    assert row.ref is not None
    states = row.states(root)
    scales = states.scales
    try:
        metadata = dict(read_header(Path(root) / row.ref.uri).metadata)
    except HiddenStatesError as exc:
        raise DatasetError(str(exc)) from exc
    metadata.pop("start", None)  # the joined file holds the lane from position 0
    write_raw(dest, raw=states.raw[:kept], dtype=row.ref.dtype, token_ids=row.input_ids[:kept],
              metadata=metadata, scales=None if scales is None else scales[:kept])


def _link(source: Path, dest: Path) -> None:
    """A hard link to ``source`` (no copy); a copy where the file system refuses one."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _write_arrow_dataset(folder: Path, ids: list[np.ndarray], masks: list[np.ndarray],
                         lengths: list[int]) -> None:
    """A ``datasets`` ``save_to_disk`` folder in torch format, as speculators' prepare-data leaves it."""
    features = {"input_ids": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
                "loss_mask": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
                "seq_len": {"dtype": "int64", "_type": "Value"}}

    def lists(arrays: list[np.ndarray]) -> pa.Array:
        offsets = np.zeros(len(arrays) + 1, np.int32)
        np.cumsum([a.size for a in arrays], out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int64()))

    schema = pa.schema([("input_ids", pa.list_(pa.int64())), ("loss_mask", pa.list_(pa.int64())),
                        ("seq_len", pa.int64())],
                       metadata={"huggingface": json.dumps({"info": {"features": features}})})
    table = pa.Table.from_arrays([lists(ids), lists(masks), pa.array(lengths, pa.int64())], schema=schema)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(table)
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))
    state: dict[str, Any] = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                             "_fingerprint": f"eaglefeed{len(lengths):07x}"[:16], "_format_columns": None,
                             "_format_kwargs": {}, "_format_type": "torch", "_output_all_columns": False,
                             "_split": None}
    (folder / "state.json").write_text(json.dumps(state, indent=2))
