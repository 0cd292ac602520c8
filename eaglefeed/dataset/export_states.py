"""``eaglefeed export --hidden-states``: the rows' captured states in the frameworks' offline layouts.

Each row's store file (``eaglefeed.dataset.hidden_states``) holds ``[T, L, H]`` for
T = ``input_ids[:-1]`` (the last token's state predicts nothing the row holds). Both frameworks
want one state per id of the row they train on, so the row written beside the states is
``input_ids[:T']`` and ``loss_mask[:T']``, with T' = T, or the kept length when ``max_length``
cuts the row (then the states are cut alike). A row left with no loss token in those T' positions
is left out and counted.

Layers are vLLM ids (0 = embeddings, k = entering decoder layer k, N = the last layer's output
*before* the final norm). Both layouts need layer N among the row's layers; the others are the
auxiliary layers, ascending.

speculators 0.9 (``speculators.train.data.ArrowDataset``): ``--data-path DIR`` is a
``datasets`` ``save_to_disk`` folder (``input_ids``, ``loss_mask``, ``seq_len``, torch format)
and ``DIR/hidden_states/hs_{i}.safetensors`` for its row ``i`` (``hs_connectors.FileTransfer``),
with ``token_ids`` equal to the row's ``input_ids`` and ``hidden_states`` ``[T', L, H]`` whose
last layer is the verifier's last state (speculators applies the verifier's norm itself) and
whose others are the auxiliary layers. That is our file as it is: it is hard-linked (copied
across file systems) unless a cut makes it shorter.

SpecForge 0.2 (``specforge.runtime.data_plane.offline_reader``, ``data.hidden_states_path``):
every ``*.ckpt`` under a folder, each a ``torch.save`` dict of ``input_ids`` ``[T']`` and
``loss_mask`` ``[T']`` (int64), ``hidden_state`` ``[1, T', H]`` and ``aux_hidden_state``
``[1, T', A*H]`` (the A auxiliary layers concatenated on the hidden axis, ascending), in
``rows_<start>-<end>/data_<i>.ckpt`` as its ``prepare_hidden_states.py`` writes them. Its target
head is the lm_head alone (``specforge/modeling/target/target_head.py``): ``hidden_state`` must
be *after* the final norm, so the export applies the target model's final RMSNorm to layer N
(``final_norm``: the model folder). Writing ``.ckpt`` needs torch, imported only here.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.dataset.hidden_states import (
    STORE,
    HiddenStatesError,
    HiddenStatesRef,
    open_states,
    read_header,
    to_float32,
)
from eaglefeed.dataset.lengths import LengthCut

FORMATS = ("specforge", "speculators")
SPECFORGE_GROUP = 2000
"""Files per ``rows_<start>-<end>/`` folder, as SpecForge's preparation script groups them."""
TORCH_HINT = ("export --hidden-states --format specforge writes torch .ckpt files and needs torch: "
              "pip install torch")
NORM_KEYS = ("model.norm.weight", "model.language_model.norm.weight", "language_model.model.norm.weight")
"""Where a transformers checkpoint keeps the final norm's weight (Llama, Qwen, Mistral and kin)."""
_ROW_COLUMNS = ("id", "input_ids", "loss_mask", "seq_len", "prompt_len")


@dataclass
class StatesSummary:
    """What one hidden-state export wrote.

    Attributes:
        fmt: ``speculators`` or ``specforge``.
        folder: where the layout is (speculators' ``--data-path``; SpecForge's ``hidden_states_path``).
        rows: rows written, each with its states.
        positions: positions (states) written.
        linked: speculators files hard-linked (or copied, when a link cannot be made) unchanged.
        rewritten: files written anew (cut rows; every SpecForge file).
        missing: rows left out because they have no states (only with ``skip_missing``).
        no_loss: rows left out with no loss token among the positions that have states.
        aux_layers: the auxiliary layers (vLLM ids), ascending.
        last_layer: N, the last layer (vLLM's: before the final norm).
        dtype: the stored dtype written.
    """

    fmt: str
    folder: Path
    rows: int = 0
    positions: int = 0
    linked: int = 0
    rewritten: int = 0
    missing: int = 0
    no_loss: int = 0
    aux_layers: tuple[int, ...] = ()
    last_layer: int = -1
    dtype: str = ""
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for people."""
        how = (f"{self.linked} linked, {self.rewritten} written" if self.fmt == "speculators"
               else f"{self.rewritten} .ckpt files")
        skipped = f"; left out: {self.missing} rows without states, {self.no_loss} with no loss token"
        return (f"{self.fmt} hidden states: {self.rows} rows, {self.positions} positions ({how}), "
                f"{self.dtype}, aux layers {list(self.aux_layers)} + last layer {self.last_layer} "
                f"→ {self.folder}{skipped}")


@dataclass(frozen=True)
class _Row:
    row_id: str
    input_ids: np.ndarray
    loss_mask: np.ndarray
    seq_len: int
    prompt_len: int
    ref: HiddenStatesRef | None


def export_states(root: Path, files: list[Path], *, fmt: str, folder: Path, max_length: int | None = None,
                  policy: str | None = None, skip_missing: bool = False,
                  final_norm: Path | None = None) -> StatesSummary:
    """Write the states of the live rows in ``files`` (a snapshot of ``root``) in ``fmt``'s layout.

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

    Raises:
        ConfigError: SpecForge without ``final_norm``, or without torch; the output is there already.
        DatasetError: rows without states (naming the count), layers unlike across rows, no
            layer N, or a file that cannot be read. Nothing is left in ``folder`` then.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown hidden-state format {fmt!r}; one of {list(FORMATS)}")
    target = folder / STORE
    taken = [target] if fmt == "specforge" else [target, folder / "state.json", folder / "dataset_info.json",
                                                 *sorted(folder.glob("data-*.arrow"))]
    for path in taken:
        if path.exists():
            raise ConfigError(f"{path} exists: export --hidden-states writes a new layout; give --out a file "
                              "in a folder of its own")
    summary = StatesSummary(fmt=fmt, folder=folder if fmt == "speculators" else target)
    layers, last = _check_rows(root, files, skip_missing, summary)
    torch = _torch() if fmt == "specforge" else None
    norm = None
    if fmt == "specforge":
        if final_norm is None:
            raise ConfigError(
                "SpecForge's offline target head is the lm_head alone, so its hidden_state must be after "
                "the final norm, and vLLM's layer N is before it: pass --final-norm MODEL_DIR (the target "
                "model's folder: config.json and safetensors weights)")
        norm = FinalNorm.from_model(final_norm)
    summary.last_layer = last
    summary.aux_layers = tuple(x for x in layers if x != last)
    cut = LengthCut(max_length=max_length, policy=policy) if max_length is not None and policy else None
    staging = folder / f".{STORE}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / STORE).mkdir(parents=True)
    try:
        if fmt == "speculators":
            _write_speculators(root, files, staging, cut, summary)
            for name in ("data-00000-of-00001.arrow", "dataset_info.json", "state.json"):
                os.replace(staging / name, folder / name)
        else:
            assert norm is not None
            _write_specforge(root, files, staging / STORE, cut, summary, torch, norm, layers.index(last))
        os.replace(staging / STORE, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def _torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # optional: trainers have it
    except ImportError as exc:
        raise ConfigError(TORCH_HINT) from exc
    return torch


def _rows(files: list[Path], *, states_only: bool = False) -> Iterator[_Row]:
    """The rows of ``files`` in order, with their references (None without states)."""
    for path in files:
        try:
            reader = pq.ParquetFile(path)
            has_states = "hidden_states" in reader.schema_arrow.names
            columns = ["id", "hidden_states"] if states_only else [*_ROW_COLUMNS, "hidden_states"]
            batches = reader.iter_batches(batch_size=256, columns=[c for c in columns
                                                                   if has_states or c != "hidden_states"])
            for batch in batches:
                yield from _batch_rows(batch, states_only=states_only)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {path}: {exc}") from exc


def _batch_rows(batch: pa.RecordBatch, *, states_only: bool) -> Iterator[_Row]:
    names = batch.schema.names
    refs = batch.column("hidden_states").to_pylist() if "hidden_states" in names else [None] * batch.num_rows
    ids = batch.column("id").to_pylist()
    empty = np.zeros(0, np.int64)
    if states_only:
        for row_id, ref in zip(ids, refs, strict=True):
            yield _Row(row_id, empty, empty, 0, 0, HiddenStatesRef.from_record(ref) if ref else None)
        return
    lists = {}
    for name in ("input_ids", "loss_mask"):
        array = batch.column(name)
        lists[name] = (array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy())
    seq = batch.column("seq_len").to_pylist()
    prompt = batch.column("prompt_len").to_pylist()
    for i, (row_id, ref) in enumerate(zip(ids, refs, strict=True)):
        values, offsets = lists["input_ids"]
        mask_values, mask_offsets = lists["loss_mask"]
        yield _Row(row_id, values[offsets[i]:offsets[i + 1]],
                   mask_values[mask_offsets[i]:mask_offsets[i + 1]], int(seq[i]), int(prompt[i]),
                   HiddenStatesRef.from_record(ref) if ref else None)


def _check_rows(root: Path, files: list[Path], skip_missing: bool,
                summary: StatesSummary) -> tuple[tuple[int, ...], int]:
    """Before writing: rows without states, one set of layers and dtype for all, and layer N among them."""
    missing: list[str] = []
    layers: tuple[int, ...] | None = None
    first: HiddenStatesRef | None = None
    for row in _rows(files, states_only=True):
        if row.ref is None:
            missing.append(row.row_id)
            continue
        if first is None:
            first, layers = row.ref, row.ref.layer_ids
            summary.dtype = row.ref.dtype
        elif row.ref.layer_ids != layers or row.ref.dtype != summary.dtype:
            raise DatasetError(f"row {row.row_id} has layers {list(row.ref.layer_ids)} ({row.ref.dtype}), "
                               f"{first.uri} {list(layers or ())} ({summary.dtype}): a training run needs "
                               "one set of layers and one dtype")
    if missing and not skip_missing:
        raise DatasetError(f"{len(missing)} rows have no hidden states (first: {', '.join(missing[:3])}); "
                           "nothing written (--skip-missing-states leaves them out)")
    summary.missing = len(missing)
    if first is None or layers is None:
        raise DatasetError("no row has hidden states: nothing to export")
    try:
        meta = read_header(Path(root) / first.uri).metadata
        last = int(meta["num_hidden_layers"])
    except (HiddenStatesError, KeyError, ValueError) as exc:
        raise DatasetError(f"{first.uri}: cannot tell the model's layer count: {exc}") from exc
    if last not in layers:
        raise DatasetError(
            f"{summary.fmt} needs the last layer N = {last} (vLLM's id: the last decoder layer's output, "
            f"before the final norm) among the captured layers; the rows have {list(layers)}. Capture "
            f"with layer {last} among the hidden-state layers")
    if len(layers) < 2:
        raise DatasetError(f"the rows hold only layer {last}: EAGLE-3 needs auxiliary layers beside it")
    return layers, last


def _kept(row: _Row, cut: LengthCut | None, summary: StatesSummary) -> int:
    """T': the positions to write (0 leaves the row out)."""
    assert row.ref is not None
    keep = row.seq_len if cut is None else cut.apply(row.row_id, row.seq_len, row.prompt_len)
    kept = min(keep, row.ref.shape[0])
    if kept and not row.loss_mask[:kept].any():
        summary.no_loss += 1
        return 0
    return kept


def _states(root: Path, ref: HiddenStatesRef) -> np.ndarray:
    try:
        return open_states(root, ref)
    except HiddenStatesError as exc:
        raise DatasetError(str(exc)) from exc


def _write_speculators(root: Path, files: list[Path], staging: Path, cut: LengthCut | None,
                       summary: StatesSummary) -> None:
    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    lengths: list[int] = []
    for row in _rows(files):
        if row.ref is None:
            continue
        kept = _kept(row, cut, summary)
        if kept == 0:
            continue
        source = Path(root) / row.ref.uri
        dest = staging / STORE / f"hs_{summary.rows}.safetensors"
        if kept == row.ref.shape[0]:
            _link(source, dest)
            summary.linked += 1
        else:
            _write_safetensors(dest, source, _states(root, row.ref)[:kept], row.input_ids[:kept])
            summary.rewritten += 1
        ids.append(np.asarray(row.input_ids[:kept], np.int64))
        masks.append(np.asarray(row.loss_mask[:kept], np.int64))
        lengths.append(kept)
        summary.rows += 1
        summary.positions += kept
    _write_arrow_dataset(staging, ids, masks, lengths)


def _link(source: Path, dest: Path) -> None:
    """A hard link to ``source`` (no copy); a copy where the file system refuses one."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _write_safetensors(dest: Path, source: Path, states: np.ndarray, token_ids: np.ndarray) -> None:
    """Our file cut to ``len(token_ids)`` positions: same dtype (raw bits), same metadata."""
    header = read_header(source)
    raw = np.ascontiguousarray(states).tobytes()
    ids = np.asarray(token_ids, np.int64).tobytes()
    code = header.tensors["hidden_states"][0]
    table = {"__metadata__": header.metadata,
             "hidden_states": {"dtype": code, "shape": list(states.shape), "data_offsets": [0, len(raw)]},
             "token_ids": {"dtype": "I64", "shape": [len(token_ids)],
                           "data_offsets": [len(raw), len(raw) + len(ids)]}}
    text = json.dumps(table, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dest, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + raw + ids)


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


@dataclass(frozen=True)
class FinalNorm:
    """The target model's final RMSNorm (as transformers' Llama applies it), for SpecForge's ``hidden_state``.

    ``x / sqrt(mean(x²) + eps)`` in float32, cast to the stored dtype, times the weight (rounded to
    the stored dtype again): the steps of ``LlamaRMSNorm`` (Qwen, Mistral alike).
    """

    weight: np.ndarray  # float32 [H]
    eps: float

    @classmethod
    def from_model(cls, model: Path) -> FinalNorm:
        """Read ``rms_norm_eps`` from ``config.json`` and the norm weight from the safetensors files.

        Raises:
            ConfigError: no config, no norm weight, or a model whose norm is not plain RMSNorm.
        """
        model = Path(model)
        try:
            config = json.loads((model / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--final-norm {model}: no readable config.json ({exc})") from exc
        text = config.get("text_config") or {}
        kind = str(config.get("model_type", ""))
        if kind.startswith("gemma"):
            raise ConfigError(f"--final-norm: {kind}'s norm scales by 1 + weight; not supported")
        eps = config.get("rms_norm_eps", text.get("rms_norm_eps"))
        if eps is None:
            raise ConfigError(f"--final-norm {model}: config.json has no rms_norm_eps (not RMSNorm?)")
        for path in sorted(model.glob("*.safetensors")):
            try:
                header = read_header(path)
            except HiddenStatesError as exc:
                raise ConfigError(f"--final-norm {model}: {exc}") from exc
            for key in NORM_KEYS:
                if key in header.tensors:
                    code, shape, begin, end = header.tensors[key]
                    return cls(weight=_read_vector(path, header.data_start + begin, end - begin, code, shape),
                               eps=float(eps))
        raise ConfigError(f"--final-norm {model}: no {' / '.join(NORM_KEYS)} in its safetensors files")

    def apply(self, states: np.ndarray, dtype: str) -> np.ndarray:
        """``states`` ``[T, H]`` (stored dtype; bf16 as uint16) normalized, in the stored dtype."""
        x = to_float32(states, dtype)
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32) + np.float32(self.eps))
        y = to_float32(_narrow(y, dtype), dtype)
        return _narrow(y * self.weight, dtype)


def _read_vector(path: Path, offset: int, size: int, code: str, shape: tuple[int, ...]) -> np.ndarray:
    numpy = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
    if code not in numpy or len(shape) != 1:
        raise ConfigError(f"{path.name}: a norm weight of dtype {code} and shape {list(shape)}")
    with open(path, "rb") as fh:
        fh.seek(offset)
        raw = np.frombuffer(fh.read(size), numpy[code])
    return to_float32(raw, "bfloat16" if code == "BF16" else "float32")


def _narrow(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 → the stored dtype (bf16 rounded to nearest even, as uint16 bits)."""
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return values.astype(np.float16 if dtype == "float16" else np.float32)


def _write_specforge(root: Path, files: list[Path], staging: Path, cut: LengthCut | None,
                     summary: StatesSummary, torch: Any, norm: FinalNorm, last_index: int) -> None:
    aux = [i for i in range(len(summary.aux_layers) + 1) if i != last_index]
    for row in _rows(files):
        if row.ref is None:
            continue
        kept = _kept(row, cut, summary)
        if kept == 0:
            continue
        states = _states(root, row.ref)[:kept]
        hidden = row.ref.shape[2]
        index = summary.rows
        start = index // SPECFORGE_GROUP * SPECFORGE_GROUP
        group = staging / f"rows_{start}-{start + SPECFORGE_GROUP}"
        group.mkdir(exist_ok=True)
        record = {
            "input_ids": torch.from_numpy(np.array(row.input_ids[:kept], np.int64)),
            "loss_mask": torch.from_numpy(np.array(row.loss_mask[:kept], np.int64)),
            "hidden_state": _tensor(torch, norm.apply(states[:, last_index], summary.dtype), summary.dtype)
            .reshape(1, kept, hidden),
            "aux_hidden_state": _tensor(torch, np.ascontiguousarray(states[:, aux]), summary.dtype)
            .reshape(1, kept, len(aux) * hidden),
        }
        torch.save(record, group / f"data_{index}.ckpt")
        summary.rows += 1
        summary.rewritten += 1
        summary.positions += kept


def _tensor(torch: Any, array: np.ndarray, dtype: str) -> Any:
    tensor = torch.from_numpy(np.array(array))  # a copy: the source is a read-only map
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor


__all__ = ["FORMATS", "FinalNorm", "StatesSummary", "export_states"]
