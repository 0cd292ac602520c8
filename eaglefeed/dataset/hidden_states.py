"""The dataset's hidden-state store: one safetensors file per row, its checks and its reference.

A capture-enabled engine (vLLM with ``eaglefeed.plugins.vllm_hidden_states``) writes each
request's states into the store, ``<dataset>/hidden_states/``, as ``<name>.tmp`` and renames it
to ``<name>`` once complete. A file holds two tensors (three in fp8) and a few metadata strings:

- ``hidden_states`` ``[T, L, H]``: the target's residual stream at L layers (ascending vLLM
  layer ids: 0 = embeddings, k = entering decoder layer k, N = the last layer's output before
  the final norm) for T = prompt + output[:-1] positions, the span EAGLE-3 trains on;
- ``token_ids`` ``[T]`` (int64): the ids those positions hold;
- with ``float8_e4m3fn``, ``hidden_states_scales`` ``[T, L, 1]`` (float32): one scale per
  position and layer, the values being ``e4m3 × scale`` (:mod:`eaglefeed.dataset.state_files.e4m3`; the
  names and layout are speculators' FP8 files', whose reader broadcasts the scales);
- metadata ``format`` (:data:`FORMAT`), ``layer_ids`` (JSON), ``num_hidden_layers``,
  ``last_layer`` and ``dtype``.

The worker checks a file against the row's ids before it publishes the row (:func:`check_file`)
and records a :class:`HiddenStatesRef`; the sink checks the reference again before it commits the
row (:func:`problem`); ``load`` reads the arrays memory-mapped (:func:`open_states`). The header
is parsed here (8-byte length, JSON) rather than through a tensor library, so neither the worker
nor the sink needs torch, and a bf16 file maps without a copy (an fp8 file maps its codes and
scales; :func:`to_float32` applies the scales to what is read).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eaglefeed.dataset.state_files import e4m3
from eaglefeed.dataset.store.mirror import mirror_of

STORE = "hidden_states"
"""The store's folder inside a dataset directory; a reference's ``uri`` is relative to the dataset."""
FORMAT = "eaglefeed-hidden-states/1"
BEFORE_FINAL_NORM = "before_final_norm"
"""The convention of layer N in vLLM's capture (transformers' ``hidden_states[N]`` is after the norm)."""
FP8 = "float8_e4m3fn"
"""The scaled FP8 store dtype (torch's name): about half of bf16's bytes."""
DTYPES = {"bfloat16": "BF16", "float32": "F32", "float16": "F16", FP8: "F8_E4M3"}
"""Stored dtype name → its safetensors code."""
SCALES = "hidden_states_scales"
"""The tensor of an fp8 file's scales, ``[T, L, 1]`` float32."""
_NUMPY = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8, "I64": np.int64,
          "I32": np.int32}
_MAX_HEADER = 1 << 24


class HiddenStatesError(ValueError):
    """A hidden-state file is missing, unreadable, or does not match its row (the reason says which)."""


@dataclass(frozen=True)
class HiddenStatesRef:
    """Where a row's states are and what they must be: the training row's ``hidden_states`` column.

    Attributes:
        uri: the file, relative to the dataset directory (``hidden_states/<name>``).
        bytes: the file's size.
        sha256: the file's hex sha256.
        shape: ``[T, L, H]`` of ``hidden_states``.
        dtype: ``bfloat16``, ``float32``, ``float16`` or ``float8_e4m3fn`` (scaled: :data:`SCALES`).
        layer_ids: the L layers, ascending (vLLM ids).
        last_layer: the convention of layer N when it is among them (:data:`BEFORE_FINAL_NORM`).
        start: the first position the file holds (0; in a ``tokens`` conversation lane, past the
            positions the lane's earlier turns hold: the lane's states are its files in turn order).
    """

    uri: str
    bytes: int
    sha256: str
    shape: tuple[int, ...]
    dtype: str
    layer_ids: tuple[int, ...]
    last_layer: str = BEFORE_FINAL_NORM
    start: int = 0

    def to_record(self) -> dict[str, Any]:
        """The reference as a GenerationRecord's ``hidden_states`` field (and a row's struct)."""
        return {"uri": self.uri, "bytes": self.bytes, "sha256": self.sha256, "shape": list(self.shape),
                "dtype": self.dtype, "layer_ids": list(self.layer_ids), "last_layer": self.last_layer,
                "start": self.start}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> HiddenStatesRef:
        """The reference a record (or a row's struct) holds."""
        return cls(uri=str(record["uri"]), bytes=int(record["bytes"]), sha256=str(record["sha256"]),
                   shape=tuple(int(x) for x in record["shape"]), dtype=str(record["dtype"]),
                   layer_ids=tuple(int(x) for x in record["layer_ids"]),
                   last_layer=str(record.get("last_layer") or BEFORE_FINAL_NORM),
                   start=int(record.get("start") or 0))


@dataclass(frozen=True)
class Header:
    """A safetensors file's header: each tensor's dtype, shape and byte range, and the metadata."""

    tensors: dict[str, tuple[str, tuple[int, ...], int, int]]
    metadata: dict[str, str]
    data_start: int


def read_header(path: Path) -> Header:
    """Parse the header of the safetensors file at ``path``.

    Raises:
        HiddenStatesError: the file is missing or its header is not safetensors.
    """
    try:
        with open(path, "rb") as fh:
            size = header_size(path.name, fh.read(8))
            text = fh.read(size)
    except FileNotFoundError:
        raise HiddenStatesError(f"{path.name}: no such file in {path.parent}") from None
    except OSError as exc:
        raise HiddenStatesError(f"{path.name}: cannot be read: {exc}") from exc
    return parse_header(path.name, text, size)


def header_size(name: str, first: bytes) -> int:
    """The header's length, from a safetensors file's first 8 bytes.

    Raises:
        HiddenStatesError: too short, or a length no safetensors header has.
    """
    if len(first) < 8:
        raise HiddenStatesError(f"{name}: shorter than a safetensors header")
    (size,) = struct.unpack("<Q", first[:8])
    if size > _MAX_HEADER:
        raise HiddenStatesError(f"{name}: a header of {size} bytes is not safetensors")
    return int(size)


def parse_header(name: str, text: bytes, size: int) -> Header:
    """The :class:`Header` of the ``size`` bytes of JSON after a file's first 8.

    Raises:
        HiddenStatesError: the JSON does not parse as a safetensors header.
    """
    try:
        if len(text) != size:
            raise ValueError(f"{len(text)} of its {size} bytes")
        header = json.loads(text)
        metadata = {str(k): str(v) for k, v in (header.pop("__metadata__", None) or {}).items()}
        tensors = {tensor: (str(t["dtype"]), tuple(int(x) for x in t["shape"]), int(t["data_offsets"][0]),
                            int(t["data_offsets"][1])) for tensor, t in header.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise HiddenStatesError(f"{name}: the header does not parse: {exc}") from exc
    return Header(tensors=tensors, metadata=metadata, data_start=8 + size)


def check_file(path: Path, *, token_ids: Sequence[int], layer_ids: Sequence[int] | None,
               dtype: str | None, store_folder: str = STORE, start: int = 0,
               digest: bool = True) -> HiddenStatesRef:
    """Check a captured file against its row and return the row's reference to it.

    Args:
        path: the file.
        token_ids: the row's prompt + output[:-1] from position ``start`` on, which the file's
            ``token_ids`` must equal.
        layer_ids: the layers the run asked for (any order); None accepts the file's.
        dtype: the stored dtype the run asked for; None accepts the file's.
        store_folder: the store's folder in the dataset (the reference's ``uri`` prefix).
        start: the first position the file must hold (its metadata ``start``; absent means 0).
        digest: hash the file for the reference's ``sha256`` (False: a file checked only to be
            replaced leaves it empty, and is not read through once more).

    Raises:
        HiddenStatesError: the file does not match, naming the first difference.
    """
    header = read_header(path)
    size = path.stat().st_size
    ref = check_header(path.name, header, size, token_count=len(token_ids), layer_ids=layer_ids,
                       dtype=dtype, store_folder=store_folder, start=start)
    check_ids(path.name, read_tensor(path, header, "token_ids"), token_ids)
    return dataclasses.replace(ref, sha256=sha256_of(path)) if digest else ref


def check_header(name: str, header: Header, size: int, *, token_count: int, layer_ids: Sequence[int] | None,
                 dtype: str | None, store_folder: str = STORE, start: int = 0) -> HiddenStatesRef:
    """What :func:`check_file` checks of a file's header and size (not its ``token_ids``' values).

    Returns:
        The row's reference, its ``sha256`` empty (the caller hashes or reads it).

    Raises:
        HiddenStatesError: the header does not match the row, naming the first difference.
    """
    meta = header.metadata
    if meta.get("format") != FORMAT:
        raise HiddenStatesError(f"{name}: format {meta.get('format')!r}, not {FORMAT!r}")
    code = header.tensors["hidden_states"][0] if "hidden_states" in header.tensors else ""
    for tensor in ("hidden_states", "token_ids", *((SCALES,) if code == DTYPES[FP8] else ())):
        if tensor not in header.tensors:
            raise HiddenStatesError(f"{name}: no {tensor} tensor")
        _code, _shape, _begin, end = header.tensors[tensor]
        if header.data_start + end > size:
            raise HiddenStatesError(f"{name}: {tensor} runs past the end of the file (truncated)")
    code, shape, _, _ = header.tensors["hidden_states"]
    stored_layers = tuple(json.loads(meta.get("layer_ids", "[]")))
    if len(shape) != 3 or shape[0] != token_count or shape[1] != len(stored_layers):
        raise HiddenStatesError(f"{name}: hidden_states of shape {list(shape)} for {token_count} "
                                f"positions and {len(stored_layers)} layers")
    if layer_ids is not None and stored_layers != tuple(sorted(layer_ids)):
        raise HiddenStatesError(f"{name}: layers {list(stored_layers)}, the run asked for "
                                f"{sorted(layer_ids)}")
    stored_dtype = next((d for d, c in DTYPES.items() if c == code), code)
    if dtype is not None and stored_dtype != dtype:
        raise HiddenStatesError(f"{name}: stored as {stored_dtype}, the run asked for {dtype}")
    if stored_dtype == FP8 and header.tensors[SCALES][:2] != ("F32", (*shape[:2], 1)):
        scale_code, scale_shape, _, _ = header.tensors[SCALES]
        raise HiddenStatesError(f"{name}: {SCALES} is {scale_code} {list(scale_shape)}, not F32 "
                                f"{[*shape[:2], 1]}")
    if int(meta.get("start", "0")) != start:
        raise HiddenStatesError(f"{name}: holds positions from {meta.get('start')}, the row's file must "
                                f"start at {start}")
    return HiddenStatesRef(uri=f"{store_folder}/{name}", bytes=size, sha256="", shape=shape,
                           dtype=stored_dtype, layer_ids=stored_layers,
                           last_layer=meta.get("last_layer", BEFORE_FINAL_NORM), start=start)


def check_ids(name: str, ids: np.ndarray, token_ids: Sequence[int]) -> None:
    """Check a file's ``token_ids`` are the row's.

    Raises:
        HiddenStatesError: they differ, naming the first position that does.
    """
    expected = np.asarray(token_ids, np.int64)
    if ids.shape != expected.shape or not np.array_equal(ids, expected):
        n = min(ids.size, expected.size)
        differ = np.flatnonzero(ids[:n] != expected[:n])
        raise HiddenStatesError(f"{name}: token_ids differ from the row's prompt + output[:-1] at "
                                f"position {int(differ[0]) if differ.size else n} (file {ids.size} ids, "
                                f"row {expected.size})")


def problem(root: Path, ref: HiddenStatesRef) -> str | None:
    """What is wrong with the file ``ref`` names under the dataset ``root``: None when it matches.

    In a dataset whose home is an object store, the file is there, not in the mirror: its size
    and the sha256 its uploader recorded (after checking the file and hashing it; the store
    checked the body's MD5 on the way) must be the row's.
    """
    path = Path(root) / ref.uri
    remote = mirror_of(Path(root))
    if remote is not None and not path.exists():
        stored = remote.store.head(ref.uri)
        if stored is None:
            return f"{ref.uri} is missing"
        if stored.size != ref.bytes:
            return f"{ref.uri} holds {stored.size} bytes in the store, its row says {ref.bytes}"
        if stored.sha256 != ref.sha256:
            return f"{ref.uri} does not match its sha256 in the store"
        return None
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{ref.uri} is missing"
    if size != ref.bytes:
        return f"{ref.uri} holds {size} bytes, its row says {ref.bytes}"
    if sha256_of(path) != ref.sha256:
        return f"{ref.uri} does not match its sha256"
    return None


def store_location(root: Path) -> str:
    """Where the dataset ``root`` keeps its states: its ``hidden_states/`` folder, or the store's."""
    remote = mirror_of(Path(root))
    return f"{remote.store.uri}/{STORE}" if remote is not None else str(Path(root) / STORE)


def local_copy(root: Path, ref: HiddenStatesRef) -> Path:
    """The path of the row's file on this host.

    In a dataset whose home is an object store, the file is downloaded into the mirror first when
    the mirror lacks it (a missing object then reads as a missing file).
    """
    path = Path(root) / ref.uri
    if not path.exists() and (remote := mirror_of(Path(root))) is not None:
        remote.store.download(ref.uri, path)
    return path


def open_states(root: Path, ref: HiddenStatesRef) -> np.ndarray:
    """The row's ``[T, L, H]`` states, memory-mapped in their stored dtype (bf16 as its raw uint16).

    An fp8 file gives its uint8 codes, whose scales :func:`open_scales` maps. :func:`to_float32`
    turns an array (or a slice of it) into float32.

    A dataset in an object store downloads the file into its mirror first.

    Raises:
        HiddenStatesError: the file is missing or does not hold what ``ref`` says.
    """
    path = local_copy(root, ref)
    header = read_header(path)
    array = read_tensor(path, header, "hidden_states")
    if tuple(array.shape) != tuple(ref.shape):
        raise HiddenStatesError(f"{ref.uri}: shape {list(array.shape)}, its row says {list(ref.shape)}")
    return array


def open_scales(root: Path, ref: HiddenStatesRef) -> np.ndarray | None:
    """An fp8 row's ``[T, L, 1]`` float32 scales, memory-mapped; None for other dtypes.

    Raises:
        HiddenStatesError: the file is missing or holds no scales of the row's shape.
    """
    if ref.dtype != FP8:
        return None
    path = local_copy(root, ref)
    header = read_header(path)
    if SCALES not in header.tensors:
        raise HiddenStatesError(f"{ref.uri}: an {FP8} file without {SCALES}")
    scales = read_tensor(path, header, SCALES)
    if tuple(scales.shape) != (*ref.shape[:2], 1) or scales.dtype != np.float32:
        raise HiddenStatesError(f"{ref.uri}: {SCALES} {list(scales.shape)}, its row needs "
                                f"{[*ref.shape[:2], 1]}")
    return scales


def to_float32(array: np.ndarray, dtype: str, scales: np.ndarray | None = None) -> np.ndarray:
    """``array`` as float32: bf16 (held as uint16) widened exactly, fp8 scaled, other dtypes cast.

    fp8 codes are multiplied by ``scales``, the same slice of :func:`open_scales` (``[..., 1]``).
    """
    if dtype == "bfloat16":
        return (np.asarray(array, np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == FP8:
        if scales is None:
            raise ValueError(f"{FP8} values need their scales")
        return e4m3.dequantize(array, scales)
    return np.asarray(array, np.float32)


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values → bf16 bits (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in 4 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def bytes_per_token(layers: int, hidden: int, dtype: str) -> int:
    """What one position costs in the store: layers × hidden × the dtype's size (fp8: + 4 per layer)."""
    if dtype == FP8:
        return layers * (hidden + 4)
    return layers * hidden * (4 if dtype == "float32" else 2)


def read_tensor(path: Path, header: Header, name: str) -> np.ndarray:
    """The tensor ``name`` of the file whose ``header`` was read, memory-mapped (bf16 as uint16, fp8 uint8).

    Raises:
        HiddenStatesError: a dtype eaglefeed does not read, or a byte range unlike the shape.
    """
    dtype, shape, begin = _tensor_layout(path.name, header, name)
    if not np.prod(shape):
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=header.data_start + begin, shape=shape)


def tensor_from_bytes(name: str, header: Header, tensor: str, data: bytes) -> np.ndarray:
    """The tensor ``tensor`` from ``data``, its bytes (a ranged read of the file named ``name``).

    Raises:
        HiddenStatesError: a dtype eaglefeed does not read, or bytes unlike the shape.
    """
    dtype, shape, _begin = _tensor_layout(name, header, tensor)
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise HiddenStatesError(f"{name}: read {len(data)} bytes of {tensor}, which holds {expected}")
    return np.frombuffer(data, dtype).reshape(shape)


def _tensor_layout(name: str, header: Header, tensor: str) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    code, shape, begin, end = header.tensors[tensor]
    if code not in _NUMPY:
        raise HiddenStatesError(f"{name}: {tensor} has dtype {code}, which eaglefeed does not read")
    dtype = np.dtype(_NUMPY[code])
    count = int(np.prod(shape)) if shape else 1
    if end - begin != count * dtype.itemsize:
        raise HiddenStatesError(f"{name}: {tensor} holds {end - begin} bytes for shape {list(shape)}")
    return dtype, shape, begin
