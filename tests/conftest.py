"""Shared fixtures: the real local Kafka broker, the SGLang stand-in, unique topic prefixes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.devtools import localbroker, localstore
from eaglefeed.devtools.launcher import StandinProcess
from eaglefeed.devtools.startup import free_port
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


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real S3-compatible server (s3proxy from Maven jars) for the session; yields its AWS_* variables."""
    data_dir = tmp_path_factory.mktemp("store")
    status = localstore.start(data_dir=data_dir, port=free_port(), cache_dir=cache_dir())
    yield status.environment()
    localstore.stop(data_dir)


@pytest.fixture
def s3_env(object_store: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process and its children pointed at the session's object store, mirrors under ``tmp_path``."""
    env = {**object_store, "EAGLEFEED_MIRROR_DIR": str(tmp_path / "mirrors")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_uri() -> str:
    """A dataset URI of its own in the session's store (a bucket per test)."""
    return f"s3://t{uuid.uuid4().hex[:12]}/datasets/run"


@pytest.fixture
def kafka_config(kafka_broker: str) -> KafkaConfig:
    """A KafkaConfig with a topic prefix of its own, so tests never share topics."""
    return KafkaConfig(bootstrap_servers=kafka_broker, topic_prefix=f"t{uuid.uuid4().hex[:10]}")


class Standins:
    """Start SGLang stand-in processes on free ports: ``standins(*flags)`` returns a base URL."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.standins: dict[str, StandinProcess] = {}

    def __call__(self, *flags: str) -> str:
        standin = StandinProcess(flags=flags)
        self.standins[standin.url] = standin  # stopped with the rest even when it fails to start
        standin.start(log=self.tmp_path / f"standin-{standin.port}.log")
        return standin.url

    def kill(self, url: str) -> None:
        """SIGKILL the stand-in at ``url`` (a server that dies mid-run)."""
        self.standins[url].kill()

    def stop_all(self) -> None:
        for standin in self.standins.values():
            standin.stop()


@pytest.fixture
def standin_factory(tmp_path: Path) -> Iterator[Standins]:
    """Start SGLang stand-in processes on free ports; yields a factory returning base URLs (and ``kill``)."""
    standins = Standins(tmp_path)
    yield standins
    standins.stop_all()
