"""A malformed server URL is a configuration error at once, with the likely fix."""

import os
import time

import pytest

from eaglefeed.core.config import KafkaConfig, WorkerConfig
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.urls import check_server_url
from tests.cli import run_cli


@pytest.mark.parametrize("url", ["http://gpu:30000", "https://gpu.example/sglang", "HTTP://10.0.0.1:8000"])
def test_http_and_https_urls_with_a_host_pass(url):
    assert check_server_url(url) == url


@pytest.mark.parametrize("url, says", [
    ("localhost:30000", "did you mean 'http://localhost:30000'"),
    ("127.0.0.1:30000", "did you mean 'http://127.0.0.1:30000'"),
    ("gpu-host", "did you mean 'http://gpu-host'"),
    ("grpc://gpu:30000", "did you mean 'http://gpu:30000'"),
    ("http://", "must start with http:// or https://"),
    ("http://gpu:port", "Port could not be cast"),
    ("http://:30000", "names no host"),
])
def test_a_malformed_url_is_refused_with_the_fix(url, says):
    with pytest.raises(ConfigError, match="server URL") as caught:
        check_server_url(url)
    assert says in str(caught.value)


def test_the_worker_config_checks_every_url():
    with pytest.raises(ConfigError, match="localhost:30000"):
        WorkerConfig(kafka=KafkaConfig(), sglang_urls=("http://a:1", "localhost:30000"))


@pytest.mark.parametrize("source", ["flag", "env"])
def test_generate_with_a_url_without_scheme_is_a_command_line_error_at_once(source):
    args = ["--sglang-url", "localhost:30000"] if source == "flag" else []
    env = {"EAGLEFEED_SGLANG_URL": "http://ok:1,localhost:30000"} if source == "env" else {}
    started = time.monotonic()
    proc = run_cli("generate", *args, "--bootstrap-servers", "127.0.0.1:1", timeout=60,
                   env={**os.environ, **env})
    assert proc.returncode == 2, proc.stderr
    assert ("--sglang-url" if source == "flag" else "EAGLEFEED_SGLANG_URL") in proc.stderr
    assert "did you mean 'http://localhost:30000'" in proc.stderr
    assert time.monotonic() - started < 20  # no connection attempt: the parser refuses it
