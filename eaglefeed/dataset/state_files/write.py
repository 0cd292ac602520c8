"""Writing store files without torch: ``write_file`` (as the connector does), a file's cuts, raw values."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eaglefeed.dataset.hidden_states import (
    BEFORE_FINAL_NORM,
    DTYPES,
    FORMAT,
    FP8,
    SCALES,
    read_header,
    read_tensor,
    to_bfloat16,
)
from eaglefeed.dataset.state_files import e4m3


def write_file(path: Path, *, states: np.ndarray, token_ids: Sequence[int], layer_ids: Sequence[int],
               num_hidden_layers: int, dtype: str = "float32", start: int = 0) -> None:
    """Write a store file as the capture connector does (tmp, fsync, rename).

    The worker writes SGLang's states this way; tests make files with it.

    Args:
        path: the final file name.
        states: ``[T, L, H]`` float values (bf16 is rounded to nearest even from float32; fp8
            quantized with a scale per position and layer, as the connector does).
        token_ids: the ``T`` ids.
        layer_ids: the L layers, ascending.
        num_hidden_layers: the model's N.
        dtype: ``float32``, ``float16``, ``bfloat16`` or ``float8_e4m3fn``.
        start: the first position the file holds (metadata ``start``, written when not 0).
    """
    values = np.asarray(states, np.float32)
    tensors: dict[str, tuple[str, np.ndarray]]
    if dtype == FP8:
        codes, scales = e4m3.quantize(values)
        tensors = {"hidden_states": (DTYPES[FP8], codes), SCALES: ("F32", scales)}
    else:
        narrowed = to_bfloat16(values) if dtype == "bfloat16" else values.astype(
            np.float16 if dtype == "float16" else np.float32)
        tensors = {"hidden_states": (DTYPES[dtype], narrowed)}
    tensors["token_ids"] = ("I64", np.asarray(token_ids, np.int64))
    metadata = {"format": FORMAT, "layer_ids": json.dumps(list(layer_ids)),
                "num_hidden_layers": str(num_hidden_layers), "last_layer": BEFORE_FINAL_NORM, "dtype": dtype,
                **({"start": str(start)} if start else {})}
    write_tensors(path, tensors, metadata)


def write_positions(source: Path, dest: Path, positions: slice, *, start: int | None = None) -> None:
    """Write the file ``source`` holds, cut to ``positions`` along T, as ``dest``: every tensor's raw values.

    Nothing is converted (an fp8 file keeps its codes and scales), so the values are exact.

    Args:
        source: a store file.
        dest: the new file's final name.
        positions: the positions to keep.
        start: the new file's metadata ``start`` (None: the source's).
    """
    header = read_header(source)
    tensors = {name: (code, read_tensor(source, header, name)[positions])
               for name, (code, _shape, _begin, _end) in header.tensors.items()}
    metadata = dict(header.metadata)
    if start is not None:
        metadata.pop("start", None)
        metadata.update({"start": str(start)} if start else {})
    write_tensors(dest, tensors, metadata)


def write_raw(path: Path, *, raw: np.ndarray, dtype: str, token_ids: np.ndarray, metadata: Mapping[str, str],
              scales: np.ndarray | None = None) -> None:
    """Write stored values as they are as a store file (a lane's joined): nothing is converted.

    Args:
        path: the final file name.
        raw: ``[T, L, H]`` in the stored dtype's bits (bf16 as uint16, fp8 as its e4m3 codes).
        dtype: their dtype (a key of ``hidden_states.DTYPES``).
        token_ids: the ``T`` ids.
        metadata: the file's metadata (a source file's, its ``start`` dropped for a file from 0).
        scales: fp8: the ``[T, L, 1]`` float32 scales of ``raw``.
    """
    tensors = {"hidden_states": (DTYPES[dtype], raw)}
    if scales is not None:
        tensors[SCALES] = ("F32", np.asarray(scales, np.float32))
    tensors["token_ids"] = ("I64", np.asarray(token_ids, np.int64))
    write_tensors(path, tensors, metadata)


def write_tensors(path: Path, tensors: Mapping[str, tuple[str, np.ndarray]],
                  metadata: Mapping[str, str]) -> None:
    """Write a safetensors file of ``name → (code, array)`` atomically (tmp, fsync, rename)."""
    table: dict[str, Any] = {"__metadata__": dict(metadata)}
    chunks: list[bytes] = []
    offset = 0
    for name, (code, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        table[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(table, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors aligns the data to 8 bytes
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for chunk in chunks:
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
