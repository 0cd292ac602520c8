"""Shared fixtures: the real local Kafka broker, the SGLang stand-in, unique topic prefixes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

from eaglefeed import localbroker
from eaglefeed.config import KafkaConfig

# Timings on a shared 2-core machine say nothing about a property: no per-example deadline.
settings.register_profile("eaglefeed", deadline=None)
settings.load_profile("eaglefeed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cache_dir() -> Path:
    return Path(os.environ.get("EAGLEFEED_CACHE_DIR", Path.home() / ".cache" / "eaglefeed"))


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Kafka 4.x broker for the whole session; yields its bootstrap address."""
    data_dir = tmp_path_factory.mktemp("broker")
    status = localbroker.start(data_dir=data_dir, port=free_port(), cache_dir=cache_dir())
    assert status.bootstrap_servers
    yield status.bootstrap_servers
    localbroker.stop(data_dir)


@pytest.fixture
def kafka_config(kafka_broker: str) -> KafkaConfig:
    """A KafkaConfig with a topic prefix of its own, so tests never share topics."""
    return KafkaConfig(bootstrap_servers=kafka_broker, topic_prefix=f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
def standin_factory(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start SGLang stand-in processes on free ports; yields a factory returning base URLs."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> str:
        port = free_port()
        log = open(tmp_path / f"standin-{port}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "eaglefeed", "stub-sglang", "--port", str(port),
                                 *flags], stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / f"standin-{port}.log").read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("stand-in did not start")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)
