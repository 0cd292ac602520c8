"""Commands a person waits for: a refused broker is one line within seconds, not a minute."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from eaglefeed.cli.main import build_parser
from eaglefeed.core.config import DEFAULT_INTERACTIVE_CONNECT_TIMEOUT, KafkaConfig


@pytest.mark.parametrize("command", [["status"], ["dead-letters"]])
def test_interactive_commands_give_up_on_the_broker_within_seconds(command):
    args = build_parser().parse_args(command)
    assert args.connect_timeout == DEFAULT_INTERACTIVE_CONNECT_TIMEOUT < KafkaConfig.connect_timeout
    assert build_parser().parse_args(["sink", "--output", "x"]).connect_timeout == KafkaConfig.connect_timeout


def test_status_on_a_refused_port_says_one_line_within_seconds():
    with socket.socket() as s:  # a port nothing listens on: every connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "eaglefeed", "status", "--once", "--bootstrap-servers",
                           f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach Kafka at 127.0.0.1:{port}" in lines[0], proc.stderr
    assert took < DEFAULT_INTERACTIVE_CONNECT_TIMEOUT + 10, took
