"""The connector puts each file into the object store itself: a real vLLM, a real s3proxy, no shared folder.

vLLM runs with ``kv_connector_extra_config.store`` = the dataset's ``s3://.../hidden_states``;
the worker's spool is a folder vLLM never sees, and the sink's output is the same ``s3://``
dataset. Each row's object is checked against transformers' own forward pass
(``tests/engine/hidden_reference.py``), as the local pipeline's files are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.config import KafkaConfig
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import HiddenStatesRef, check_file
from eaglefeed.dataset.store import ObjectStore, open_dataset, parse
from tests.engine.conftest import CaptureServer
from tests.engine.pipeline_support import Pipeline
from tests.engine.test_capture_pipeline import CONFIGURED, FP32_TOLERANCE, _prompts, _reference

pytestmark = pytest.mark.engine


def test_the_connector_puts_each_file_into_the_store_and_every_row_holds_transformers_states(
        capture_vllm: Callable[..., CaptureServer], tiny_model_4_dir: Path, kafka_config: KafkaConfig,
        s3_env: dict[str, str], s3_uri: str, tmp_path: Path,
        record_property: Callable[[str, object], None]) -> None:
    server = capture_vllm(layer_ids=CONFIGURED, dtype="float32", store=f"{s3_uri}/hidden_states", env=s3_env)
    spool = tmp_path / "spool"  # the worker's, never the server's
    out = open_dataset(s3_uri)  # the sink's mirror; the dataset's home is the store
    prompts = _prompts()[:10]
    capture = CaptureSettings(store=spool, layers=CONFIGURED, dtype="float32", upload=s3_uri)
    outcome = Pipeline(kafka_config, (server.url,), out, capture=capture, engine="vllm",
                       concurrency=10).run(prompts, rows=len(prompts))
    assert not outcome.dead, outcome.dead
    rows = outcome.rows
    assert sorted(r["id"] for r in rows) == sorted(f"{p['prompt_id']}:0" for p in prompts)
    assert not [p for p in server.store_dir.rglob("*") if p.is_file()]  # the GPU host kept no file
    assert not list(spool.iterdir())  # nor did the worker spool one
    log = server.server.log_path.read_text(errors="replace")
    assert f"in {s3_uri}/hidden_states" in log
    assert "does not exist yet (the worker's start creates it)" in log  # checked at start, said once

    store = ObjectStore(parse(s3_uri))
    named = {HiddenStatesRef.from_record(r["hidden_states"]).uri for r in rows}
    assert {obj.rel for obj in store.listing(hidden_states.STORE)} == named  # the probe's object is gone
    files = []
    for row in rows:
        ref = HiddenStatesRef.from_record(row["hidden_states"])
        stored = store.head(ref.uri)
        assert stored is not None and stored.size == ref.bytes and stored.sha256 == ref.sha256
        local = tmp_path / "fetched" / Path(ref.uri).name
        assert store.download(ref.uri, local) and hidden_states.sha256_of(local) == ref.sha256
        check_file(local, token_ids=row["input_ids"][:-1], layer_ids=CONFIGURED, dtype="float32")
        files.append(local)
    worst: dict[str, float] = {}
    for report in _reference(tiny_model_4_dir, files):
        for layer, diff in report["layers"].items():
            worst[layer] = max(worst.get(layer, 0.0), diff["max_abs"])
    record_property("store_capture_max_abs_by_layer", json.dumps(worst))
    print(f"\nconnector-to-store vs transformers, max abs diff by layer over {len(files)} rows: {worst}")
    assert set(worst) == {"1", "3", "4"} and max(worst.values()) <= FP32_TOLERANCE
