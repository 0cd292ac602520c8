"""--trust-remote-code on every command that loads a tokenizer; without it, one line and a non-zero exit."""

from __future__ import annotations

import os
import pty
import subprocess

import pytest

from eaglefeed.cli.converse import converse_config
from eaglefeed.cli.generate import worker_config
from eaglefeed.cli.main import build_parser
from eaglefeed.cli.produce import producer_config
from eaglefeed.devtools.standin.cli import config_from_args
from tests.cli import run_cli

COMMANDS = {"produce": ["p.jsonl", "--tokenizer", "tok"], "generate": [], "converse": [], "stub-sglang": []}


def _configs(command, args):
    made = {"produce": lambda: producer_config(args).prompts, "generate": lambda: worker_config(args),
            "converse": lambda: converse_config(args), "stub-sglang": lambda: config_from_args(args)}
    return made[command]()


@pytest.mark.parametrize("command", COMMANDS)
def test_the_flag_is_off_by_default_and_reaches_the_config(command, monkeypatch):
    monkeypatch.delenv("EAGLEFEED_TRUST_REMOTE_CODE", raising=False)
    parser = build_parser()
    assert _configs(command, parser.parse_args([command, *COMMANDS[command]])).trust_remote_code is False
    flagged = parser.parse_args([command, *COMMANDS[command], "--trust-remote-code"])
    assert _configs(command, flagged).trust_remote_code is True
    monkeypatch.setenv("EAGLEFEED_TRUST_REMOTE_CODE", "1")
    assert _configs(command, parser.parse_args([command, *COMMANDS[command]])).trust_remote_code is True


@pytest.mark.parametrize(("workers", "terminal"), [("0", False), ("1", False), ("0", True)])
def test_produce_without_the_flag_stops_with_one_line_before_kafka(remote_tokenizer, tmp_path, workers,
                                                                  terminal):
    """On a terminal too: transformers would ask [y/N] there if it were given None."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    primary, secondary = pty.openpty() if terminal else (None, None)
    try:
        done = run_cli("produce", str(prompts), "--tokenizer", str(remote_tokenizer), "--workers", workers,
                       "--bootstrap-servers", "127.0.0.1:1", "--connect-timeout", "30",
                       "--state-dir", str(tmp_path / "state"), timeout=120, env=env,
                       stdin=secondary if terminal else subprocess.DEVNULL)
    finally:
        for fd in (primary, secondary):
            if fd is not None:
                os.close(fd)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "runs its own Python code" in lines[0] and "pass --trust-remote-code" in lines[0]
    assert "Kafka" not in done.stderr  # refused before connecting: nothing could be published
    assert "[y/N]" not in done.stdout + done.stderr
