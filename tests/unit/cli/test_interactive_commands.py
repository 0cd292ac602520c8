"""Commands a person waits for: a refused broker is one line within seconds, not a minute."""

from __future__ import annotations

import socket
import time

import pytest

from eaglefeed.cli.main import build_parser
from eaglefeed.core.config import DEFAULT_INTERACTIVE_CONNECT_TIMEOUT, KafkaConfig
from tests.cli import run_cli


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
    proc = run_cli("status", "--once", "--bootstrap-servers", f"127.0.0.1:{port}", timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach Kafka at 127.0.0.1:{port}" in lines[0], proc.stderr
    assert took < DEFAULT_INTERACTIVE_CONNECT_TIMEOUT + 10, took


def test_a_ctrl_c_that_kafka_python_swallows_still_stops_status_while_connecting(monkeypatch):
    """CI once saw `status` wait its whole --connect-timeout after a Ctrl-C: the interrupt landed in
    kafka-python's bootstrap, which ate it. A stop flag survives that; KeyboardInterrupt did not."""
    import os
    import signal
    import threading

    import kafka.errors

    from eaglefeed.cli.main import main
    from eaglefeed.core import kafka as core_kafka
    from eaglefeed.core import lifecycle

    def swallowing_admin(**_settings):
        try:
            time.sleep(0.3)
        except KeyboardInterrupt:
            pass  # as a broad `except BaseException` in a client's event loop would
        raise kafka.errors.KafkaTimeoutError("Unable to bootstrap")

    monkeypatch.setattr(core_kafka, "KafkaAdminClient", swallowing_admin)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    try:
        code = main(["status", "--once", "--connect-timeout", "8", "--bootstrap-servers", "127.0.0.1:1"])
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        lifecycle._installed.clear()  # noqa: SLF001 - the flag this process's main() installed
    assert code == 130 and time.monotonic() - started < 4
