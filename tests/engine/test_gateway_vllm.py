"""The real SGLang model gateway (smg) in front of the real vLLM: why no row can go through it.

smg 1.13 fronts vLLM over HTTP as a text proxy only: no route carries token ids both ways, so
the worker must stop with one line naming the gateway (docs/DEPLOY.md, "Behind the SGLang model
gateway") rather than wait or write rows. These assertions are what was measured; when a newer
smg routes token ids to vLLM they fail, and the gateway can then be tested for rows.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from eaglefeed.consumers.generate.inference import read_server_info
from eaglefeed.core.errors import ConfigError
from tests.conftest import free_port
from tests.engine.conftest import SERVED_MODEL, VllmServer

pytestmark = pytest.mark.engine


@pytest.fixture
def gateway(vllm_server: VllmServer, tmp_path: Path) -> Iterator[str]:
    """``smg launch`` (defaults) with the session's vLLM as its one HTTP worker; its URL."""
    beside = Path(sys.executable).parent / "smg"
    command = str(beside) if beside.exists() else shutil.which("smg")
    if command is None:
        pytest.skip("the SGLang model gateway is not installed (pip install 'smg>=1.13', in the dev extra)")
    port = free_port()
    with (tmp_path / "smg.log").open("wb") as log:
        proc = subprocess.Popen([command, "launch", "--host", "127.0.0.1", "--port", str(port),
                                 "--prometheus-port", str(free_port()), "--log-level", "warn",
                                 "--worker-urls", vllm_server.url], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(url):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "smg.log").read_text()
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_no_route_of_the_gateway_carries_token_ids_to_vllm(gateway: str) -> None:
    prompt = [1, 2, 3, 4]
    completions = httpx.post(f"{gateway}/v1/completions", timeout=60, json={
        "model": SERVED_MODEL, "prompt": prompt, "max_tokens": 2, "return_token_ids": True})
    assert completions.status_code == 400 and "StringOrArray" in completions.text  # its own schema
    native = httpx.post(f"{gateway}/inference/v1/generate", timeout=60, json={
        "token_ids": prompt, "sampling_params": {"max_tokens": 2}})
    assert native.status_code == 404
    sglang = httpx.post(f"{gateway}/generate", timeout=60, json={"input_ids": prompt})
    assert sglang.status_code == 404  # proxied to vLLM, which has no /generate
    assert httpx.get(f"{gateway}/version", timeout=10).status_code == 404


@pytest.mark.parametrize("engine", ["auto", "sglang", "vllm"])
def test_the_worker_stops_with_one_line_on_a_gateway_before_vllm(gateway: str, engine: str) -> None:
    async def detect() -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            await read_server_info(http, gateway, engine)

    with pytest.raises(ConfigError) as caught:
        asyncio.run(detect())
    message = str(caught.value)
    assert "SGLang model gateway" in message and "vLLM servers' own URLs" in message and "\n" not in message


def _ready(url: str) -> bool:
    try:
        resp = httpx.get(f"{url}/readiness", timeout=2)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200 and resp.json().get("healthy_workers") == 1
