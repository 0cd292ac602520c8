"""Shared fixtures: the real local Kafka broker, the SGLang stand-in, unique topic prefixes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.startup import free_port, wait_healthy
from tests.remote_tokenizer import write_remote_tokenizer

# Timings on a shared 2-core machine say nothing about a property: no per-example deadline.
settings.register_profile("eaglefeed", deadline=None)
settings.load_profile("eaglefeed")

__all__ = ["cache_dir", "free_port"]  # integration tests import them from here


@pytest.fixture
def remote_tokenizer(tmp_path: Path) -> Path:
    """A remote-code tokenizer of Kimi-K2's shape in ``tmp_path`` (see tests/remote_tokenizer.py)."""
    return write_remote_tokenizer(tmp_path / "kimi-like")


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
        log_path = tmp_path / f"standin-{port}.log"
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen([sys.executable, "-m", "eaglefeed", "stub-sglang", "--port", str(port),
                                     *flags], stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process=proc, log=log_path)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)
