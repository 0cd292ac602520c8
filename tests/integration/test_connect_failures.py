"""A wrong broker address: every stage stops in bounded time with one line; Ctrl-C stops it at once.

No broker is needed: the address is a free local port nothing listens on (issue 18, item 5).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import start_cli
from tests.conftest import free_port

TIMEOUT = 3  # --connect-timeout


def commands(tmp_path: Path) -> dict[str, list[str]]:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    return {"produce": ["produce", str(rows), "--tokenizer", str(TOKENIZER_DIR),
                        "--state-dir", str(tmp_path / "state")],
            "generate": ["generate"], "sink": ["sink", "--output", str(tmp_path / "out")],
            "status": ["status", "--once", "--interval", "0.1"]}


def eaglefeed(args: list[str], address: str) -> subprocess.Popen[str]:
    return start_cli(*args, "--bootstrap-servers", address, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)


@pytest.mark.parametrize("command", ["produce", "generate", "sink", "status"])
def test_a_dead_address_fails_in_bounded_time_with_one_line(command, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = eaglefeed([*commands(tmp_path)[command], "--connect-timeout", str(TIMEOUT)], address)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err  # no kafka-python chatter, no traceback
    assert address in lines[0] and "ECONNREFUSED" in lines[0] and "--connect-timeout" in lines[0]
    assert TIMEOUT <= elapsed < TIMEOUT + 25  # interpreter and tokenizer start-up included


@pytest.mark.parametrize("command", ["produce", "generate", "sink", "status"])
def test_a_first_ctrl_c_while_connecting_stops_the_stage_promptly(command, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    proc = eaglefeed([*commands(tmp_path)[command], "--connect-timeout", "120"], address)
    time.sleep(8)  # started (the producer loads its tokenizer first), and trying to reach the broker
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _out, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err  # "SIGINT: ..." + where
    if command in ("generate", "sink"):  # (produce may still be starting its render processes)
        assert f"stopped while connecting to Kafka at {address}" in err
