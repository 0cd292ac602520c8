"""The real SGLang model gateway before two stand-ins: every prompt one row, a lost server costs nothing,
and a gateway with no server left stays out of rotation."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from eaglefeed.consumers.generate.inference import ServerPool, read_server_info
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.lifecycle import StopSignal
from tests.conftest import Standins, free_port
from tests.factories import make_prompt
from tests.integration.worker_support import (
    count_generations,
    dead_letters,
    publish_prompts,
    spawn_worker,
)
from tests.running import wait_until

pytestmark = pytest.mark.kafka
PROMPTS = 240
STANDIN = ("--latency-model", "batching", "--decode-step-ms", "4", "--output-len-mean", "24")


def smg_command() -> str:
    """The gateway's console script beside this interpreter (the dev extra installs it), else on PATH."""
    beside = Path(sys.executable).parent / "smg"
    found = str(beside) if beside.exists() else shutil.which("smg")
    if found is None:
        pytest.skip("the SGLang model gateway is not installed (pip install 'smg>=1.13', in the dev extra)")
    return found


@pytest.fixture
def gateway(standin_factory: Standins, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """``smg launch`` (default policy and health checks) in front of two stand-ins: (its URL, theirs)."""
    command = smg_command()
    workers = [standin_factory(*STANDIN), standin_factory(*STANDIN)]
    port = free_port()
    log = open(tmp_path / "smg.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([command, "launch", "--host", "127.0.0.1", "--port", str(port),
                             "--prometheus-port", str(free_port()), "--log-level", "warn",
                             "--worker-urls", *workers], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url, proc), timeout=60, what="the gateway to report both workers healthy")
        yield url, workers
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_every_prompt_is_one_row_through_the_gateway_and_a_killed_server_loses_nothing(
        kafka_config, standin_factory, gateway, tmp_path):
    url, workers = gateway
    publish_prompts(kafka_config, [make_prompt(i) for i in range(PROMPTS)], partitions=4)
    out = tmp_path / "dataset"
    stop = StopSignal()
    sink = threading.Thread(target=run_sink, args=(SinkConfig(kafka=kafka_config, output=out,
                                                              flush_seconds=0.5),), kwargs={"stop": stop})
    sink.start()
    worker = spawn_worker(kafka_config, url, tmp_path / "worker.log", "--concurrency", "16",
                          "--exit-when-idle", "5", "--connect-timeout", "20")
    try:
        wait_until(lambda: count_generations(kafka_config) >= PROMPTS // 4, timeout=120,
                   what="a quarter of the rows")
        standin_factory.kill(workers[0])  # behind the gateway, with requests in flight on it
        assert worker.wait(timeout=240) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        wait_until(lambda: _rows(out) >= PROMPTS, timeout=60, what="every row in the dataset")
    finally:
        worker.kill()
        stop.set()
        sink.join(timeout=60)
    log = (tmp_path / "worker.log").read_text()
    assert "through an SGLang model gateway" in log and "answers neither" not in log
    rows = pq.read_table(out / "segments").to_pylist()
    assert len(rows) == PROMPTS and len({r["id"] for r in rows}) == PROMPTS  # each prompt once
    assert dead_letters(kafka_config) == []
    served = {r["engine_version"] for r in rows}
    assert served == {"0.0.0-eaglefeed-standin"}  # the workers' own version, read through the gateway


@pytest.mark.parametrize("engine", ["auto", "sglang"])
def test_the_gateway_is_detected_with_either_engine_setting(gateway, engine):
    url, _workers = gateway

    async def detect():
        async with httpx.AsyncClient() as http:
            return await read_server_info(http, url, engine)

    info = asyncio.run(detect())
    assert (info.engine, info.model_path, info.gateway) == ("sglang", "eaglefeed/standin-demo", True)
    for path in ("/model_info", "/server_info"):  # what detection asked for before: still a 404 there
        assert httpx.get(f"{url}{path}").status_code == 404


def test_a_gateway_whose_servers_are_all_down_leaves_rotation_though_its_health_is_200(
        standin_factory, gateway):
    """Its own /health stays 200: only a generation through it tells, and keeps it out."""
    url, workers = gateway

    async def run() -> tuple[int, bool, str | None, int]:
        async with httpx.AsyncClient(timeout=30) as http:
            pool = ServerPool(client=http, urls=[url], eject_after=1, probe_interval=0.2)
            server = await pool.acquire()
            assert (await pool.info(server)).gateway
            for worker in workers:
                standin_factory.kill(worker)
            failed = await http.post(f"{url}/generate", json={"input_ids": [1, 2], "sampling_params": {
                "max_new_tokens": 2}})
            pool.release(server, failed=failed.status_code != 200)
            await asyncio.sleep(3)  # fifteen probes
            health = (await http.get(f"{url}/health")).status_code
            await pool.close()
            return failed.status_code, server.healthy, server.last_error, health

    status, healthy, reason, health = asyncio.run(run())
    assert status >= 500 and health == 200
    assert not healthy, "the gateway came back into rotation with no server behind it"
    assert reason is not None and ("through the gateway answered HTTP 5" in reason or "/readiness" in reason)


def _ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "the gateway exited"
    try:
        resp = httpx.get(f"{url}/readiness", timeout=2)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200 and resp.json().get("healthy_workers") == 2


def _rows(out: Path) -> int:
    try:
        return pq.read_table(out / "segments").num_rows
    except (FileNotFoundError, OSError):
        return 0
