"""Capture under kills: worker, capture server and sink killed mid-run; one matching row per prompt.

Worker and sink run as ``eaglefeed`` processes (``kill -9``), the vLLM capture server is killed
and started again on its port. Afterwards every prompt is exactly one row (no dead letters are
expected here), every row's file exists with its sha256 and holds the row's input_ids[:-1], a
sample of rows equals transformers' forward (bf16 rounding), and ``eaglefeed gc`` leaves no file
that no row names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import eaglefeed
from eaglefeed.core.config import KafkaConfig
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.collect import collect
from eaglefeed.dataset.hidden_states import check_file
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.dataset.store import ObjectStore, open_dataset, parse
from tests.cli import kafka_flags, start_cli
from tests.engine.conftest import ENGINE_PYTHON, CaptureServer
from tests.engine.pipeline_support import prompt_record
from tests.integration.worker_support import count_generations, dead_letters, publish_prompts
from tests.running import wait_until

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
LAYERS = (1, 2, 4)  # the default of a 4-layer model with its last layer: --hidden-states auto+last
PROMPTS = 80


def _rows(out: Path) -> int:
    try:
        return sum(s["rows"] for s in live_segments(read_manifest(out)).values())
    except FileNotFoundError:
        return 0


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


@pytest.fixture(params=["directory", "store"])
def home(request: pytest.FixtureRequest) -> str:
    """Where the dataset lives: a directory vLLM writes into, or an object store vLLM puts into."""
    return str(request.param)


def test_kills_of_worker_server_and_sink_leave_one_matching_row_per_prompt_and_no_orphan(
        capture_vllm: Callable[..., CaptureServer], tiny_model_4_dir: Path, kafka_config: KafkaConfig,
        tmp_path: Path, home: str, request: pytest.FixtureRequest) -> None:
    # "store": vLLM's connector puts each file into s3proxy itself (kv_connector_extra_config.store),
    # the worker checks the objects by ranged reads, the sink writes the dataset there; worker and
    # sink run on mirrors of their own, so all they share with vLLM and each other is the store.
    env: dict[str, str] | None = None
    if home == "store":
        s3_env: dict[str, str] = request.getfixturevalue("s3_env")
        uri: str = request.getfixturevalue("s3_uri")
        server = capture_vllm(layer_ids=LAYERS, dtype="bfloat16", store=f"{uri}/hidden_states", env=s3_env)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")} | s3_env | {
            "EAGLEFEED_MIRROR_DIR": str(tmp_path / "mirror-stages")}
        dataset, states_dir = uri, f"{uri}/hidden_states"
        spool = ("--hidden-states-spool", str(tmp_path / "spool"))
    else:
        server = capture_vllm(layer_ids=LAYERS, dtype="bfloat16")
        out = tmp_path / "dataset"
        out.mkdir()
        (out / hidden_states.STORE).symlink_to(server.store_dir)
        dataset, states_dir, spool = str(out), str(out / hidden_states.STORE), ()

    def rows_now() -> int:
        return _rows(open_dataset(dataset)) if home == "store" else _rows(Path(dataset))

    prompts = [prompt_record(i, [1, 50 + i, *range(100 + i, 130 + 3 * (i % 20)), 2], max_new_tokens=24)
               for i in range(PROMPTS)]
    publish_prompts(kafka_config, prompts, partitions=3)
    common = kafka_flags(kafka_config)
    worker_args = ("generate", "--sglang-url", server.url, "--engine", "vllm", "--concurrency", "8",
                   "--hidden-states", "auto+last", "--hidden-states-dir", states_dir, *spool,
                   "--retry-backoff", "0.2", "--retry-backoff-max", "2", "--probe-interval", "0.5",
                   "--vocab-size", "off", "--settle-seconds", "0", *common)
    sink_args = ("sink", "--output", dataset, "--flush-seconds", "0.5", *common)
    logs = tmp_path / "logs"
    logs.mkdir()
    worker = start_cli(*worker_args, log=logs / "worker.log", env=env)
    sink = start_cli(*sink_args, log=logs / "sink.log", env=env)
    procs = [worker, sink]
    try:
        wait_until(lambda: count_generations(kafka_config) >= 15, timeout=180, what="the first generations")
        _kill(worker)  # mid-run: what was in flight is done again by the next worker
        worker = start_cli(*worker_args, log=logs / "worker.log", append=True, env=env)
        procs.append(worker)
        wait_until(lambda: count_generations(kafka_config) >= 35, timeout=180, what="more generations")
        server.server.kill()  # the capture server crashes mid-run: files it had not written never appear
        time.sleep(2)
        server.server.start()
        wait_until(lambda: rows_now() >= 50, timeout=300, what="50 rows")
        _kill(sink)
        sink = start_cli(*sink_args, log=logs / "sink.log", append=True, env=env)
        procs.append(sink)
        wait_until(lambda: rows_now() >= PROMPTS, timeout=300, what="every prompt a row")
        time.sleep(2)  # a duplicate would land now
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)

    assert not dead_letters(kafka_config)
    rows = eaglefeed.load(dataset, hidden_states=True)
    out = open_dataset(dataset)  # this host's copy (a mirror of the store: the states fetched as read)
    ids = [row["id"] for row in rows]
    assert sorted(ids) == sorted(f"{p['prompt_id']}:0" for p in prompts), "a prompt lost or doubled"
    for row in rows:
        ref = row["hidden_states"].ref
        assert hidden_states.problem(out, ref) is None
        check_file(hidden_states.local_copy(out, ref), token_ids=row["input_ids"][:-1], layer_ids=LAYERS,
                   dtype="bfloat16")
        assert hidden_states.sha256_of(out / ref.uri) == ref.sha256

    def stored() -> set[str]:
        if home == "store":
            return {Path(o.rel).name for o in ObjectStore(parse(dataset)).listing(hidden_states.STORE)}
        return {p.name for p in server.store_dir.iterdir()}

    before = len(stored())
    summary = collect(out, grace_seconds=0)
    left = stored()
    assert summary.missing == 0 and summary.referenced == PROMPTS
    assert left == {Path(row["hidden_states"].ref.uri).name for row in rows}, "an orphan survived gc"
    if home == "store":
        assert not [p for p in server.store_dir.rglob("*") if p.is_file()]  # vLLM's host kept no file
        assert not [p for p in (tmp_path / "spool").rglob("*") if p.is_file()]
    print(f"\ncapture under kills ({home}): {PROMPTS} rows, {before} files before gc, {summary.deleted} "
          "collected")

    sample = [str(out / row["hidden_states"].ref.uri) for row in list(rows)[::10]]
    lines = "".join(json.dumps({"path": p}) + "\n" for p in sample)
    result = subprocess.run([str(ENGINE_PYTHON), str(HERE / "hidden_reference.py"), str(tiny_model_4_dir)],
                            input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    for report in (json.loads(line) for line in result.stdout.splitlines() if line.strip()):
        for layer, diff in report["layers"].items():
            # bf16 of transformers' fp32: within half a bf16 step of it (plus the engine's fp32 noise),
            # and nearly every value bit-equal to it rounded (tests/engine/test_hidden_states_capture.py)
            assert diff["max_excess"] <= 1e-6 and diff["equal_fraction"] >= 0.99, (layer, diff)
