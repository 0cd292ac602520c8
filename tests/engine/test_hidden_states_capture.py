"""Hidden states captured in the generating pass (eaglefeed/plugins/vllm_hidden_states.py) vs transformers.

Two capture-enabled vLLM CPU servers on the 4-layer tiny model (engine in float32):

* fp32 store, every layer id 0..4 configured out of order: concurrent mixed lengths, prefix-cache
  hits, greedy output, the file contract (atomic final name, metadata, shapes);
* bf16 store with chunked prefill (a 256-token step budget; unseeded greedy requests only,
  since vLLM CPU dies when a seeded request's prefill is chunked).

The reference is transformers' fp32 forward on the file's own token ids (tests/engine/hidden_reference.py,
run with the engine venv's python).
"""

from __future__ import annotations

import ast
import json
import random
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.conftest import (
    CAPTURE_LAYERS_N,
    ENGINE_PYTHON,
    HERE,
    PLUGINS_DIR,
    CaptureServer,
    run_greedy_reference,
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]

NATIVE = "/inference/v1/generate"
HIDDEN = 128
ALL_LAYERS_SHUFFLED = (4, 0, 2, 1, 3)  # every vLLM id of the 4-layer model, out of order
BF16_LAYERS = (3, 1, 4)
FP32_TOLERANCE = 1e-5
BF16_FP32_SLACK = 1e-6  # the engine's fp32 distance from transformers allowed under bf16 rounding
# Lengths around the CPU block size (128) and the fp32 step edges, a few tokens to ~1,500.
LENGTHS = (1, 3, 9, 16, 17, 100, 127, 128, 129, 255, 256, 257, 400, 511, 512, 513, 777, 1023, 1024, 1025,
           1290, 1500)
FILE_WAIT_S = 60.0


def metadata_for(layer_ids: Sequence[int], dtype: str) -> dict[str, str]:
    return {"format": "eaglefeed-hidden-states/1", "layer_ids": json.dumps(sorted(layer_ids)),
            "num_hidden_layers": str(CAPTURE_LAYERS_N), "last_layer": "before_final_norm", "dtype": dtype}


def prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(9, 4096) for _ in range(length)]  # no special ids (0..8)


def generate(server: CaptureServer, rid: str, token_ids: Sequence[int], max_tokens: int) -> dict[str, Any]:
    body = {"request_id": rid, "token_ids": list(token_ids),
            "sampling_params": {"max_tokens": max_tokens, "temperature": 0},
            "kv_transfer_params": {"include_output_tokens": True}}
    response = httpx.post(server.url + NATIVE, json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def path_of(response: dict[str, Any]) -> Path:
    params = response.get("kv_transfer_params") or {}
    assert "hidden_states_path" in params, f"no hidden_states_path in {response}"
    return Path(params["hidden_states_path"])


def wait_for(paths: Sequence[Path], timeout: float = FILE_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return
        time.sleep(0.05)
    missing = [str(p) for p in paths if not p.exists()]
    raise AssertionError(f"{len(missing)} hidden-states files never appeared: {missing[:5]}")


def compare(model_dir: Path, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run hidden_reference.py on ``[{"path": ..., "configured": [...]}, ...]``; one result each."""
    lines = "".join(json.dumps({**item, "path": str(item["path"])}) + "\n" for item in items)
    cmd = [str(ENGINE_PYTHON), str(HERE / "hidden_reference.py"), str(model_dir)]
    result = subprocess.run(cmd, input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"hidden_reference.py failed:\n{result.stderr[-4000:]}"
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(rows) == len(items)
    return rows


def complete_safetensors(path: Path) -> bool:
    """Whether a safetensors file is whole: its size equals header + the data its header names."""
    data = path.read_bytes()
    if len(data) < 8:
        return False
    (header_len,) = struct.unpack("<Q", data[:8])
    if len(data) < 8 + header_len:
        return False
    header = json.loads(data[8:8 + header_len])
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    return len(data) == 8 + header_len + end


def gauges_of(server: CaptureServer, names: Sequence[str]) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            values[name] = float(line.rsplit(" ", 1)[1])
    return values


def wait_for_gauges(server: CaptureServer, want: dict[str, float], timeout: float = 20.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        values = gauges_of(server, list(want))
        if values == want or time.monotonic() > deadline:
            assert values == want, f"engine gauges {values}, wanted {want}"
            return values
        time.sleep(0.25)


def run_batch(server: CaptureServer, requests: Sequence[tuple[str, list[int], int]]
              ) -> tuple[list[dict[str, Any]], float]:
    began = time.monotonic()
    with ThreadPoolExecutor(len(requests)) as pool:
        responses = list(pool.map(lambda r: generate(server, *r), requests))
    return responses, time.monotonic() - began


def expected_tokens(token_ids: Sequence[int], response: dict[str, Any]) -> list[int]:
    return list(token_ids) + response["choices"][0]["token_ids"][:-1]


def check_file(row: dict[str, Any], want_tokens: list[int], layer_ids: Sequence[int], dtype: str) -> None:
    assert row["keys"] == ["hidden_states", "token_ids"]
    assert row["metadata"] == metadata_for(layer_ids, dtype)
    assert row["token_ids"] == want_tokens
    assert row["token_ids_dtype"] == "int64"
    assert row["dtype"] == dtype
    assert row["shape"] == [len(want_tokens), len(layer_ids), HIDDEN]


def worst(rows: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    layers = rows[0]["layers"].keys()
    return {k: max(row["layers"][k][key] for row in rows) for k in layers}


def worst_low(rows: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    layers = rows[0]["layers"].keys()
    return {k: min(row["layers"][k][key] for row in rows) for k in layers}


def _import_roots(nodes: Iterable[ast.AST]) -> set[str]:
    modules = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module or "" for node in nodes if isinstance(node, ast.ImportFrom)}
    return {name.split(".")[0] for name in modules}


def test_connector_file_stands_alone() -> None:
    """It ships as one file: only the standard library, torch, safetensors and vLLM (boto3 when asked)."""
    tree = ast.parse((PLUGINS_DIR / "vllm_hidden_states.py").read_text())
    allowed = set(sys.stdlib_module_names) | {"__future__", "torch", "safetensors", "vllm"}
    top = _import_roots(tree.body)  # what importing the file needs
    assert top <= allowed, top - allowed
    assert {"torch", "safetensors", "vllm"} <= top
    # boto3 only inside the store writer: a connector without the store option never imports it
    everywhere = _import_roots(list(ast.walk(tree)))
    assert everywhere <= allowed | {"boto3", "botocore"}, everywhere - allowed


# ---------------------------------------------------------------------------------------- fp32 store


# Class-scoped servers: each is stopped when its class is done, so the two never run together.
@pytest.fixture(scope="class")
def fp32_server(capture_vllm_factory: Callable[..., CaptureServer]) -> Iterator[CaptureServer]:
    server = capture_vllm_factory(layer_ids=ALL_LAYERS_SHUFFLED, dtype="float32",
                                  flags=("--enable-prompt-tokens-details",))
    print(f"\nfp32 capture server started in {server.server.start_seconds[-1]:.1f} s")
    yield server
    server.server.stop()


@pytest.fixture(scope="class")
def fp32_batch(fp32_server: CaptureServer, tiny_model_4_dir: Path) -> dict[str, Any]:
    requests = [(f"mix{i}", prompt(i, n), 8 + i % 9) for i, n in enumerate(LENGTHS)]
    responses, seconds = run_batch(fp32_server, requests)
    paths = [path_of(r) for r in responses]
    wait_for(paths)
    rows = compare(tiny_model_4_dir, [{"path": p, "configured": list(ALL_LAYERS_SHUFFLED)} for p in paths])
    print(f"\n{len(requests)} concurrent requests in {seconds:.2f} s")
    return {"requests": requests, "responses": responses, "paths": paths, "rows": rows}


class TestFp32Store:
    """Every layer id, configured out of order, stored as float32."""

    def test_concurrent_mixed_lengths_match_transformers_fp32(self, fp32_batch: dict[str, Any]) -> None:
        assert len(fp32_batch["requests"]) >= 16
        assert len(set(fp32_batch["paths"])) == len(fp32_batch["paths"])
        for (_rid, token_ids, _n), response, row in zip(fp32_batch["requests"], fp32_batch["responses"],
                                                        fp32_batch["rows"], strict=True):
            check_file(row, expected_tokens(token_ids, response), ALL_LAYERS_SHUFFLED, "float32")
            for layer, figures in row["layers"].items():
                assert figures["max_abs"] <= FP32_TOLERANCE, (row["path"], layer, figures)
        print(f"\nworst max abs diff per layer (fp32 store): {worst(fp32_batch['rows'], 'max_abs')}")

    def test_layers_configured_out_of_order_are_stored_ascending(self, fp32_batch: dict[str, Any]) -> None:
        for row in fp32_batch["rows"]:
            assert json.loads(row["metadata"]["layer_ids"]) == [0, 1, 2, 3, 4]
            # Read in the configured order instead, the file is far from transformers: the order matters.
            assert row["max_abs_configured_order"] > 100 * FP32_TOLERANCE, row["path"]
        print(f"\nmin max abs diff read in the configured order: "
              f"{min(r['max_abs_configured_order'] for r in fp32_batch['rows']):.3g}")

    def test_greedy_output_with_capture_equals_transformers(self, fp32_batch: dict[str, Any],
                                                            tiny_model_4_dir: Path) -> None:
        refs = run_greedy_reference(tiny_model_4_dir, [{"id": rid, "input_ids": ids, "max_new_tokens": n}
                                                       for rid, ids, n in fp32_batch["requests"]])
        for (rid, _ids, _n), response in zip(fp32_batch["requests"], fp32_batch["responses"], strict=True):
            assert response["choices"][0]["token_ids"] == refs[rid], rid

    def test_decode_steps_schedule_no_draft_token(self, fp32_server: CaptureServer,
                                                  fp32_batch: dict[str, Any]) -> None:
        """The connector's proposer drops vLLM's draft token: decode steps are not speculative.

        With the stock proposer nearly every decode step drafts one token per request (about one
        per generated token); here only the scheduler's placeholder for a request admitted with a
        single token left to compute can draft (docs/journal/capture-overhead.md).
        """
        names = ["vllm:spec_decode_num_draft_tokens_total", "vllm:generation_tokens_total"]
        counters = gauges_of(fp32_server, names)
        generated = counters.get("vllm:generation_tokens_total", 0.0)
        drafted = counters.get("vllm:spec_decode_num_draft_tokens_total", 0.0)
        assert generated >= sum(n for _rid, _ids, n in fp32_batch["requests"]), counters
        assert drafted <= 0.05 * generated, counters
        print(f"\n{drafted:.0f} draft tokens for {generated:.0f} generated tokens")

    def test_prefix_cache_hits_still_match(self, fp32_server: CaptureServer, tiny_model_4_dir: Path) -> None:
        prefix = prompt(1000, 1024)  # 8 full blocks of 128
        requests = [("pfx-warm", prefix + prompt(1001, 40), 8)]
        requests += [(f"pfx-{i}", prefix + prompt(1002 + i, n), 12) for i, n in enumerate((1, 77, 300))]
        requests += [("pfx-again", requests[0][1], 10)]  # identical to the warm prompt
        responses = [generate(fp32_server, *r) for r in requests]  # one at a time: each hits the last
        cached = [(r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                  for r in responses]
        assert cached[0] == 0, cached
        assert all(c >= 1024 for c in cached[1:]), cached
        paths = [path_of(r) for r in responses]
        wait_for(paths)
        rows = compare(tiny_model_4_dir, [{"path": p} for p in paths])
        for (_rid, token_ids, _n), response, row in zip(requests, responses, rows, strict=True):
            check_file(row, expected_tokens(token_ids, response), ALL_LAYERS_SHUFFLED, "float32")
            for layer, figures in row["layers"].items():
                assert figures["max_abs"] <= FP32_TOLERANCE, (row["path"], layer, figures)
        print(f"\ncached tokens {cached}; worst max abs diff per layer: {worst(rows, 'max_abs')}")

    def test_final_name_appears_only_complete(self, fp32_server: CaptureServer) -> None:
        store = fp32_server.store_dir
        seen: dict[Path, bool] = {}
        stop = threading.Event()

        def watch() -> None:  # check every new final file the moment it appears
            while not stop.is_set():
                for path in store.glob("*.safetensors"):
                    if path not in seen:
                        seen[path] = complete_safetensors(path)
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        requests = [(f"atomic{i}", prompt(2000 + i, 600 + 37 * i), 12) for i in range(16)]
        try:
            responses, _ = run_batch(fp32_server, requests)
            paths = [path_of(r) for r in responses]
            wait_for(paths)
            time.sleep(1.0)
        finally:
            stop.set()
            watcher.join(timeout=10)
        assert all(p in seen for p in paths)
        incomplete = [str(p) for p, whole in seen.items() if not whole]
        assert not incomplete, f"final names seen before their file was complete: {incomplete}"
        assert not list(store.glob("*.tmp")), "temporary files left behind"
        assert not list(store.glob("*.lock")), "lock files written"
        assert all(complete_safetensors(p) for p in store.glob("*.safetensors"))
        # Every request was reported finished by the connector and its blocks freed.
        gauges = wait_for_gauges(fp32_server, {"vllm:num_requests_running": 0.0,
                                               "vllm:kv_cache_usage_perc": 0.0})
        print(f"\n{len(seen)} final files checked on first sight, all complete; after: {gauges}")


# ------------------------------------------------------------------------ bf16 store, chunked prefill


@pytest.fixture(scope="class")
def bf16_server(capture_vllm_factory: Callable[..., CaptureServer]) -> Iterator[CaptureServer]:
    server = capture_vllm_factory(layer_ids=BF16_LAYERS, dtype="bfloat16",
                                  flags=("--max-num-batched-tokens", "256"))
    print(f"\nbf16 capture server started in {server.server.start_seconds[-1]:.1f} s")
    yield server
    server.server.stop()


@pytest.fixture(scope="class")
def bf16_batch(bf16_server: CaptureServer, tiny_model_4_dir: Path) -> dict[str, Any]:
    lengths = (5, 128, 300, 640, 1024, 1100, 1500, 257)
    requests = [(f"bf{i}", prompt(3000 + i, n), 10 + i % 7) for i, n in enumerate(lengths)]
    responses, seconds = run_batch(bf16_server, requests)
    paths = [path_of(r) for r in responses]
    wait_for(paths)
    rows = compare(tiny_model_4_dir, [{"path": p} for p in paths])
    print(f"\n{len(requests)} concurrent chunked requests in {seconds:.2f} s")
    return {"requests": requests, "responses": responses, "rows": rows}


class TestBf16ChunkedPrefill:
    """Stored as bfloat16, prefills chunked by a 256-token step budget."""

    def test_bf16_store_equals_transformers_rounded(self, bf16_server: CaptureServer,
                                                    bf16_batch: dict[str, Any]) -> None:
        assert "'max_num_batched_tokens': 256" in bf16_server.server.log_path.read_text(), "not chunked"
        for (_rid, token_ids, _n), response, row in zip(bf16_batch["requests"], bf16_batch["responses"],
                                                        bf16_batch["rows"], strict=True):
            check_file(row, expected_tokens(token_ids, response), BF16_LAYERS, "bfloat16")
            for layer, figures in row["layers"].items():
                # Each stored value is the engine's fp32 value v rounded to bf16, so within half a
                # bf16 step of v, and v is within ~1e-7 of transformers' (the fp32 case): |stored -
                # reference| may exceed half a step by BF16_FP32_SLACK at most. Counted in steps
                # from the rounded reference it can look like several: near zero a bf16 step is
                # far below the engine's 1e-7 fp32 distance.
                assert figures["max_excess"] <= BF16_FP32_SLACK, (row["path"], layer, figures)
                assert figures["equal_fraction"] >= 0.99, (row["path"], layer, figures)
        print(f"\nbf16: worst excess over half a step {worst(bf16_batch['rows'], 'max_excess')}, "
              f"worst steps from the rounded reference {worst(bf16_batch['rows'], 'max_ulps')}, "
              f"worst max abs vs fp32 {worst(bf16_batch['rows'], 'max_abs')}, "
              f"lowest bit-equal fraction per layer {worst_low(bf16_batch['rows'], 'equal_fraction')}")

    def test_chunked_prefill_greedy_equals_transformers(self, bf16_batch: dict[str, Any],
                                                        tiny_model_4_dir: Path) -> None:
        refs = run_greedy_reference(tiny_model_4_dir, [{"id": rid, "input_ids": ids, "max_new_tokens": n}
                                                       for rid, ids, n in bf16_batch["requests"]])
        for (rid, _ids, _n), response in zip(bf16_batch["requests"], bf16_batch["responses"], strict=True):
            assert response["choices"][0]["token_ids"] == refs[rid], rid


# ------------------------------------------------------------------------------------ write failures


class TestWriteFailure:
    """A store the connector cannot write to: errors are logged, the engine serves on, blocks are freed."""

    def test_failed_writes_are_logged_and_release_blocks(
            self, capture_vllm_factory: Callable[..., CaptureServer], tmp_path: Path) -> None:
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("a file where the store directory should be\n")
        server = capture_vllm_factory(layer_ids=(CAPTURE_LAYERS_N,), dtype="float32",
                                      store_dir=blocker / "hs")
        try:
            requests = [(f"fail{i}", prompt(4000 + i, 50 + 200 * i), 8) for i in range(4)]
            responses, _ = run_batch(server, requests)
            paths = [path_of(r) for r in responses]
            time.sleep(1.0)
            assert not any(p.exists() for p in paths)
            log = server.server.log_path.read_text(errors="replace")
            assert log.count("eaglefeed hidden states: writing") == len(requests), log[-3000:]
            wait_for_gauges(server, {"vllm:num_requests_running": 0.0, "vllm:kv_cache_usage_perc": 0.0})
            again = generate(server, "after", prompt(4100, 30), 8)  # the engine still serves
            assert again["choices"][0]["token_ids"]
        finally:
            server.server.stop()
