"""A wrong inference server URL never waits forever (issue 27, item 2; issue 36, trip 8).

A server that has never answered stops the worker with one line naming the URL and the cause
(``--exit-when-idle`` included): within a few tries when waiting cannot cure the cause (connection
refused, host not found, TLS), within ``--connect-timeout`` when it may (no response yet). A
malformed URL is a command-line error at once, and Ctrl-C while no server answers exits at once
instead of draining for 30 s.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.cli import kafka_flags, start_cli
from tests.conftest import free_port
from tests.factories import make_prompt
from tests.integration.worker_support import publish_prompts

pytestmark = pytest.mark.kafka
TIMEOUT = 3  # --connect-timeout


def generate(kafka, url: str, *flags: str) -> subprocess.Popen[str]:
    return start_cli("generate", "--sglang-url", url, *kafka_flags(kafka), *flags,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextmanager
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers (a server still starting, a hung one)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("wrong", ["https_on_plain", "unknown_host"])
def test_a_cause_waiting_cannot_cure_stops_the_worker_in_a_few_tries(wrong, kafka_config, standin_factory):
    publish_prompts(kafka_config, [make_prompt(i) for i in range(3)], partitions=1)
    if wrong == "unknown_host":
        url, cause = "http://no-such-host.invalid:30000", "DNS: host not found"
    else:
        url, cause = standin_factory("--latency-model", "none").replace("http://", "https://"), "TLS"
    started = time.monotonic()
    proc = generate(kafka_config, url, "--connect-timeout", "60", "--exit-when-idle", "1")
    _out, err = proc.communicate(timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1, err  # no traceback, no retry chatter
    assert url in lines[0] and cause in lines[0] and "--sglang-url" in lines[0], lines[0]
    assert "3 tries" in lines[0] and "waiting longer does not cure this" in lines[0], lines[0]
    assert elapsed < 40  # a few tries, not the 60 s of --connect-timeout (start-up included)


def test_a_refused_connection_is_waited_out_then_named_with_the_timeout(kafka_config):
    """A server loading its model (or restarting) refuses connections: the worker waits for it."""
    publish_prompts(kafka_config, [make_prompt(i) for i in range(3)], partitions=1)
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = generate(kafka_config, url, "--connect-timeout", str(TIMEOUT), "--exit-when-idle", "1")
    _out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if " ERROR " in line]
    assert len(lines) == 1 and url in lines[0] and "connection refused" in lines[0], err
    assert "--connect-timeout" in lines[0] and TIMEOUT <= elapsed < TIMEOUT + 25


def test_a_server_that_accepts_but_never_answers_is_waited_for_the_whole_connect_timeout(kafka_config):
    publish_prompts(kafka_config, [make_prompt(i) for i in range(3)], partitions=1)
    with silent_server() as url:
        started = time.monotonic()
        proc = generate(kafka_config, url, "--connect-timeout", str(TIMEOUT), "--exit-when-idle", "1")
        _out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1, err
    assert url in lines[0] and "--connect-timeout" in lines[0], lines[0]
    assert TIMEOUT <= elapsed < TIMEOUT + 25  # interpreter start-up and the Kafka clients included


@pytest.mark.parametrize("url", ["127.0.0.1:30000", "grpc://127.0.0.1:30000"])
def test_a_malformed_url_is_a_command_line_error_at_once(url, kafka_config):
    started = time.monotonic()
    proc = generate(kafka_config, url)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "--sglang-url" in err and "did you mean 'http://127.0.0.1:30000'" in err
    assert time.monotonic() - started < 15


def test_ctrl_c_while_no_server_answers_exits_at_once(kafka_config):
    publish_prompts(kafka_config, [make_prompt(i) for i in range(3)], partitions=1)
    with silent_server() as url:
        proc = generate(kafka_config, url, "--connect-timeout", "120")
        time.sleep(8)  # started, past Kafka, and waiting for the server
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _out, err = proc.communicate(timeout=40)
    assert time.monotonic() - sent < 5, err  # not the 30 s drain
    assert proc.returncode == 130, err
    assert f"stopped while connecting to {url}" in err and "Traceback" not in err
