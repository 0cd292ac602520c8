"""What the worker reads to check a row's states the connector put into the store: ranges against the whole file.

Not a test. A local s3proxy holds one hidden-state file of an 8B-class row (``--tokens`` positions
x 4 layers x 4096 hidden, bf16: 64 MiB at 2,048 tokens), put as the connector puts it (sha256
metadata). The worker's check in that mode (``eaglefeed.dataset.store.states.check_stored``: HEAD,
then ranged GETs of the header and ``token_ids``) is timed against the baseline a worker on another
host would otherwise need, in the same run: download the object and ``check_file`` it (hashing it).

    .venv/bin/python -m bench.store_check [--tokens 2048] [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from eaglefeed.core.config import cache_dir
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.state_files.write import write_file
from eaglefeed.dataset.store import ObjectStore, parse
from eaglefeed.dataset.store.states import check_stored
from eaglefeed.devtools import localstore
from eaglefeed.devtools.startup import free_port

LAYERS, HIDDEN = (2, 16, 29, 32), 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        status = localstore.start(data_dir=work / "store", port=free_port(), cache_dir=cache_dir())
        try:
            os.environ.update(status.environment())
            results = _measure(work, args.tokens, args.repeat)
        finally:
            localstore.stop(work / "store")
    print(f"{args.tokens} tokens x {len(LAYERS)} layers x {HIDDEN} bf16: a {results['store_object_mib']:.1f} MiB "
          f"object; ranged check {results['store_ranged_check_ms']:.1f} ms reading "
          f"{results['store_ranged_check_kib']:.0f} KiB ({results['store_bytes_ratio']:.5f} of it); download + check {results['store_download_check_ms']:.0f} "
          f"ms; ratio {results['store_check_ratio']:.3f}")
    print("RESULT " + json.dumps(results))


def _measure(work: Path, tokens: int, repeat: int) -> dict[str, float]:
    path = work / "row.safetensors"
    ids = list(range(tokens))
    states = np.random.default_rng(0).standard_normal((tokens, len(LAYERS), HIDDEN), dtype=np.float32)
    write_file(path, states=states, token_ids=ids, layer_ids=LAYERS, num_hidden_layers=32, dtype="bfloat16")
    store = ObjectStore(parse("s3://bench/ds"))
    store.ensure_bucket()
    rel = f"{hidden_states.STORE}/{path.name}"
    store.put_file(rel, path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    size = path.stat().st_size
    read = _count_ranges(store)
    ranged, whole = [], []
    for i in range(repeat):
        began = time.perf_counter()
        stored = store.head(rel)
        assert stored is not None
        ref = check_stored(store, stored, token_ids=ids, layer_ids=LAYERS, dtype="bfloat16")
        ranged.append(time.perf_counter() - began)
        began = time.perf_counter()
        local = work / f"fetched-{i}.safetensors"
        assert store.download(rel, local)
        full = hidden_states.check_file(local, token_ids=ids, layer_ids=LAYERS, dtype="bfloat16")
        whole.append(time.perf_counter() - began)
        local.unlink()
        assert dataclasses.replace(full, uri=ref.uri) == ref  # the same reference, the same sha256
    per_check = read[0] / repeat
    return {"store_object_mib": size / 2**20, "store_ranged_check_ms": 1000 * float(np.median(ranged)),
            "store_ranged_check_kib": per_check / 1024,
            "store_download_check_ms": 1000 * float(np.median(whole)),
            "store_check_ratio": float(np.median(ranged) / np.median(whole)), "store_bytes_ratio": per_check / size}


def _count_ranges(store: ObjectStore) -> list[int]:
    """Count the bytes the store's ranged reads return (the check's only reads of the body)."""
    total = [0]
    get_range = store.get_range

    def counted(rel: str, first: int, last: int) -> bytes | None:
        data = get_range(rel, first, last)
        total[0] += len(data or b"")
        return data

    store.get_range = counted  # type: ignore[method-assign]
    return total


if __name__ == "__main__":
    main()
