"""Give rows written without hidden states their states afterwards (``eaglefeed capture``), exactly once.

A row's states are captured by a prefill-only request (``eaglefeed.ops.capture_states``); this
module is the dataset side of it:

- **Names.** Each row's file gets a name derived from the row's id alone,
  ``hidden_states/eaglefeed-capture-<sha256(id)[:32]>.safetensors`` (:func:`final_name`), and
  the request that captures it carries that key in its id, so the file the server names
  (``<prefix><request id>-<suffix>.safetensors``) holds it too. :func:`find_existing` finds a
  row's file of an earlier, interrupted run under either name; :func:`adopt` checks a file
  (``check_file``) and renames it to the row's name, so a killed run started again sends no
  row whose file is already in the store and checks out.
- **Rows.** :func:`scan` lists the live files with rows whose ``hidden_states`` is null;
  :func:`missing_rows` streams those rows (their ids and prompt + output[:-1]) from a file
  opened while the manifest still lists it.
- **Files.** :func:`fill_file` replaces one live file by a copy whose rows carry their
  references, as compaction replaces files (``eaglefeed.dataset.compact``): under the
  compaction lock, streamed into a new shard (temp, fsync, rename), then one manifest event
  ``{"kind": "capture", "added": [SEG], "removed": [path]}`` checked against the live files,
  then the old file deleted once no reader holds the dataset. Every other column is copied
  unchanged; a row that already has a reference keeps it (a row never gets two). Just before
  the event, under the exclusive gc lock (``eaglefeed gc`` cannot run meanwhile), each file to
  be named is checked to exist with its size.

Files of failed or interrupted attempts are left to ``eaglefeed gc``; :func:`adopt` touches each
file it keeps, so gc's grace period counts from the capture.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError, ManifestError
from eaglefeed.dataset import freq, manifest
from eaglefeed.dataset.compact import SHARD_PREFIX, collect_garbage
from eaglefeed.dataset.hidden_states import STORE, HiddenStatesRef, check_file
from eaglefeed.dataset.shards import HIDDEN_STATES_TYPE, TRAINING_SCHEMA, ParquetFile, conform, fsync_dir
from eaglefeed.dataset.snapshot import iter_batches

CAPTURE_PREFIX = "eaglefeed-capture-"
CAPTURE_LOCK = ".capture.lock"
"""One ``eaglefeed capture`` per dataset at a time."""
EVENT_KIND = "capture"
_KEY = re.compile(r"eaglefeed-capture-([0-9a-f]{32})")
_SUFFIX = ".safetensors"


def row_key(row_id: str) -> str:
    """The row's key in file names: the first 32 hex digits of its id's sha256."""
    return hashlib.sha256(row_id.encode("utf-8")).hexdigest()[:32]


def final_name(row_id: str) -> str:
    """The name of the row's file in the store: ``eaglefeed-capture-<key>.safetensors``."""
    return f"{CAPTURE_PREFIX}{row_key(row_id)}{_SUFFIX}"


def request_prefix(row_id: str) -> str:
    """How the id of a request capturing the row begins (the server puts it in its file's name)."""
    return f"{CAPTURE_PREFIX}{row_key(row_id)}"


def trained_positions(input_ids: Sequence[int], prompt_len: int) -> list[int]:
    """The ids of prompt + output[:-1], the positions EAGLE-3 trains on (the worker captures these)."""
    ids = list(input_ids)
    return ids[:-1] if len(ids) > prompt_len else ids


@dataclass(frozen=True)
class MissingRow:
    """A row without states: its id and the ids whose states it needs."""

    id: str
    token_ids: list[int]


@dataclass(frozen=True)
class FileToFill:
    """A live file with rows whose ``hidden_states`` is null."""

    path: str
    missing: int


@dataclass
class Scan:
    """What :func:`scan` found."""

    files: list[FileToFill] = field(default_factory=list)
    missing: int = 0  # rows without states
    referenced: int = 0  # rows with
    formats: set[tuple[tuple[int, ...], str]] = field(default_factory=set)  # (layers, dtype) of those


def scan(root: Path) -> Scan:
    """The live files of ``root`` with rows without states, and the layers and dtype of the rows with.

    Raises:
        DatasetError: ``root`` is not a dataset, or one of its files cannot be read.
    """
    root = Path(root)
    _check_dataset(root)
    found = Scan()
    with manifest.locked(root, manifest.GC_LOCK, shared=True):
        for rel in manifest.live_segments(manifest.read_manifest(root)):
            path = root / rel
            try:
                names = pq.read_schema(path).names
                if "hidden_states" in names:
                    refs = pq.read_table(path, columns=["hidden_states"]).column("hidden_states").to_pylist()
                else:
                    refs = [None] * pq.read_metadata(path).num_rows
            except (OSError, pa.ArrowException) as exc:
                raise DatasetError(f"{path}: cannot be read: {exc}") from exc
            missing = sum(ref is None for ref in refs)
            found.missing += missing
            found.referenced += len(refs) - missing
            found.formats.update((tuple(r["layer_ids"]), str(r["dtype"])) for r in refs if r is not None)
            if missing:
                found.files.append(FileToFill(path=rel, missing=missing))
    return found


def missing_rows(root: Path, rel: str, *, batch_rows: int = 256) -> Iterator[list[MissingRow]]:
    """The rows of live file ``rel`` without states, ``batch_rows`` rows read at a time.

    The file is opened while the manifest lists it (under the shared gc lock), so a compaction
    that removes it meanwhile cannot take it away from under the reader. Nothing is yielded if it
    is not live any more.

    Raises:
        DatasetError: the file cannot be read.
    """
    root = Path(root)
    handle: BinaryIO
    with manifest.locked(root, manifest.GC_LOCK, shared=True):
        if rel not in manifest.live_segments(manifest.read_manifest(root)):
            return
        try:
            handle = open(root / rel, "rb")  # noqa: SIM115 - closed below, after the lock is released
        except OSError as exc:
            raise DatasetError(f"cannot read {root / rel}: {exc}") from exc
    with handle:
        try:
            reader = pq.ParquetFile(handle)
            has_refs = "hidden_states" in reader.schema_arrow.names
            columns = ["id", "input_ids", "prompt_len"] + (["hidden_states"] if has_refs else [])
            for batch in reader.iter_batches(batch_size=batch_rows, columns=columns):
                data = batch.to_pydict()
                refs = data["hidden_states"] if has_refs else [None] * batch.num_rows
                rows = [MissingRow(id=str(row_id), token_ids=trained_positions(ids, int(prompt_len)))
                        for row_id, ids, prompt_len, ref in zip(data["id"], data["input_ids"],
                                                                data["prompt_len"], refs, strict=True)
                        if ref is None]
                if rows:
                    yield rows
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {root / rel}: {exc}") from exc


def find_existing(store: Path, row_id: str, names: Sequence[str] = ()) -> list[Path]:
    """The store's files that may hold the row's states: its own name first, then the server's names.

    Args:
        store: the dataset's ``hidden_states/``.
        row_id: the row.
        names: the store's file names by key (:func:`store_names`), read once at the start.
    """
    own = Path(store) / final_name(row_id)
    found = [own] if own.exists() else []
    return found + [Path(store) / name for name in names if name != own.name]


def store_names(store: Path) -> dict[str, list[str]]:
    """Every complete file of the store whose name carries a row key, by key (``.tmp`` files left out)."""
    by_key: dict[str, list[str]] = {}
    try:
        entries = list(os.scandir(store))
    except FileNotFoundError:
        return by_key
    for entry in entries:
        if not entry.name.endswith(_SUFFIX):
            continue
        match = _KEY.search(entry.name)
        if match:
            by_key.setdefault(match.group(1), []).append(entry.name)
    return by_key


def adopt(store: Path, row_id: str, path: Path, *, token_ids: Sequence[int], layer_ids: Sequence[int],
          dtype: str | None) -> HiddenStatesRef:
    """Check ``path`` against the row and make it the row's file: its reference, under the row's name.

    The file is renamed to :func:`final_name` (atomically, in the same folder) and touched, so
    that gc's grace period counts from now.

    Raises:
        HiddenStatesError: the file does not match the row, the layers or the dtype.
    """
    store = Path(store)
    ref = check_file(path, token_ids=token_ids, layer_ids=layer_ids, dtype=dtype)
    final = store / final_name(row_id)
    if path != final:
        os.replace(path, final)
        fsync_dir(store)
    os.utime(final)
    return dataclasses.replace(ref, uri=f"{STORE}/{final.name}")


@dataclass(frozen=True)
class FillResult:
    """What :func:`fill_file` did.

    Attributes:
        path: the file replaced.
        new_path: the file that replaced it (None: nothing was replaced).
        filled: rows that got their reference.
        moved: the file was not live any more (a compaction merged it meanwhile: its rows are elsewhere).
        lost: row ids whose file vanished before the event (not filled).
    """

    path: str
    new_path: str | None = None
    filled: int = 0
    moved: bool = False
    lost: tuple[str, ...] = ()


def fill_file(root: Path, rel: str, refs: Mapping[str, HiddenStatesRef], *,
              hook: Callable[[str], None] | None = None) -> FillResult:
    """Replace live file ``rel`` by a copy whose rows without states carry ``refs`` (by row id).

    Args:
        root: the dataset directory.
        rel: the live file (``segments/<name>``).
        refs: row id → its checked reference; ids the file does not hold are ignored.
        hook: test-only, called with ``after_rename`` and ``after_manifest`` (raise to simulate a crash).

    Raises:
        DatasetError: the file cannot be read.
    """
    root = Path(root)
    hook = hook or (lambda _step: None)
    with manifest.locked(root, manifest.COMPACT_LOCK):  # waits for a running compaction
        entry = manifest.live_segments(manifest.read_manifest(root)).get(rel)
        if entry is None:
            return FillResult(path=rel, moved=True)
        origin = json.dumps([rel, entry.get("sha256"), "hidden_states"]).encode()
        key = hashlib.sha256(origin).hexdigest()[:20]
        name = f"{SHARD_PREFIX}{key}.parquet"
        counts = freq.TokenCounter()
        used: dict[str, HiddenStatesRef] = {}
        with ParquetFile(root, name) as out:
            for batch in iter_batches([root / rel], batch_rows=512):
                table = conform(pa.Table.from_batches([batch]), TRAINING_SCHEMA).cast(TRAINING_SCHEMA)
                table = _with_refs(table, refs, used)
                freq.count_table(table, counts)
                out.write(table)
        if not used:
            out.final.unlink(missing_ok=True)
            return FillResult(path=rel)
        added = {k: v for k, v in entry.items() if k not in out.entry and k != freq.FREQ} | out.entry
        added[freq.FREQ] = freq.write_sidecar(root, name, counts)
        hook("after_rename")
        with manifest.locked(root, manifest.GC_LOCK):  # gc cannot collect a file we are about to name
            lost = tuple(row_id for row_id, ref in used.items() if not _present(root, ref))
            if lost:
                _discard(root, added)
                return FillResult(path=rel, lost=lost)
            try:
                manifest.append_manifest(root, {"kind": EVENT_KIND, "added": [added], "removed": [rel]},
                                         expect_live=[rel])
            except ManifestError:  # cannot happen while we hold the compaction lock; be safe anyway
                _discard(root, added)
                return FillResult(path=rel, moved=True)
        hook("after_manifest")
        collect_garbage(root)
    return FillResult(path=rel, new_path=added["path"], filled=len(used))


def _with_refs(table: pa.Table, refs: Mapping[str, HiddenStatesRef], used: dict[str, HiddenStatesRef]
               ) -> pa.Table:
    """``table`` with the null ``hidden_states`` of the rows ``refs`` names filled in (noted in ``used``)."""
    current = table.column("hidden_states").to_pylist()
    ids = table.column("id").to_pylist()
    changed = False
    for i, (row_id, ref) in enumerate(zip(ids, current, strict=True)):
        if ref is None and row_id in refs and row_id not in used:
            current[i] = refs[row_id].to_record()
            used[row_id] = refs[row_id]
            changed = True
    if not changed:
        return table
    index = table.schema.get_field_index("hidden_states")
    return table.set_column(index, TRAINING_SCHEMA.field("hidden_states"),
                            pa.array(current, HIDDEN_STATES_TYPE))


def _present(root: Path, ref: HiddenStatesRef) -> bool:
    try:
        return (root / ref.uri).stat().st_size == ref.bytes
    except FileNotFoundError:
        return False


def _discard(root: Path, entry: Mapping[str, Any]) -> None:
    (root / entry["path"]).unlink(missing_ok=True)
    if entry.get(freq.FREQ):
        (root / entry[freq.FREQ]).unlink(missing_ok=True)


def _check_dataset(root: Path) -> None:
    if not (root / manifest.MANIFEST).is_file():
        raise DatasetError(f"{root} is not an eaglefeed dataset (no {manifest.MANIFEST})")
