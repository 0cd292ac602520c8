"""Check a hidden-state file the engine put into the object store itself, without downloading it.

With ``kv_connector_extra_config.store`` the vLLM connector serializes each request's file in
memory, hashes it and puts it into ``<dataset>/hidden_states/`` with its sha256 as metadata and
the body's MD5 (which the store checks on receipt): the GPU host keeps no file, and the worker
may run on any host. The worker reads what it needs of the object by ranged GETs, the header and
``token_ids`` (a few kB of a 64 MiB row), checks them as it checks a local file
(``eaglefeed.dataset.hidden_states.check_header``), and takes the size and sha256 for the row's
reference from the store; the sink then checks the store's copy against that reference as it
does for files the worker uploaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from eaglefeed.dataset.hidden_states import (
    STORE,
    Header,
    HiddenStatesError,
    HiddenStatesRef,
    check_header,
    check_ids,
    header_size,
    parse_header,
    tensor_from_bytes,
)
from eaglefeed.dataset.store.client import ObjectStore, StoredObject

FIRST_READ = 64 * 1024
"""The first ranged read: the header and, in the files the connector writes, ``token_ids`` after it."""


def check_stored(store: ObjectStore, stored: StoredObject, *, token_ids: Sequence[int],
                 layer_ids: Sequence[int] | None, dtype: str | None) -> HiddenStatesRef:
    """Check the object ``stored`` (from :meth:`ObjectStore.head`) against its row; return its reference.

    Raises:
        HiddenStatesError: the object does not match its row, has no ``sha256`` metadata, or is gone.
    """
    name = stored.rel.rsplit("/", 1)[-1]
    if not stored.sha256:
        raise HiddenStatesError(f"{name}: the store's object has no sha256 metadata (not put by eaglefeed's "
                                "connector)")
    header, first = read_stored_header(store, stored.rel)
    ref = check_header(name, header, stored.size, token_count=len(token_ids), layer_ids=layer_ids,
                       dtype=dtype, store_folder=STORE)
    _code, _shape, begin, end = header.tensors["token_ids"]
    lo, hi = header.data_start + begin, header.data_start + end
    data = first[lo:hi] if hi <= len(first) else (_read(store, stored.rel, lo, hi - 1) if hi > lo else b"")
    check_ids(name, tensor_from_bytes(name, header, "token_ids", data), token_ids)
    return dataclasses.replace(ref, sha256=stored.sha256)


def read_stored_header(store: ObjectStore, rel: str) -> tuple[Header, bytes]:
    """The header of the object ``rel``, and the bytes of the first read (what follows the header in it).

    Raises:
        HiddenStatesError: the object is gone or its header is not safetensors.
    """
    name = rel.rsplit("/", 1)[-1]
    first = _read(store, rel, 0, FIRST_READ - 1)
    size = header_size(name, first)
    text = first[8:8 + size] if 8 + size <= len(first) else _read(store, rel, 8, 7 + size)
    return parse_header(name, text, size), first


def _read(store: ObjectStore, rel: str, first: int, last: int) -> bytes:
    data = store.get_range(rel, first, last)
    if data is None:
        raise HiddenStatesError(f"{rel.rsplit('/', 1)[-1]}: gone from the store while it was checked")
    return data
