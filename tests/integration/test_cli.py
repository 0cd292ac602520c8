"""The command line: help for every command, environment configuration, the broker lifecycle."""

from __future__ import annotations

import pytest

from eaglefeed.cli.main import build_parser, main
from tests.cli import run_cli
from tests.conftest import cache_dir, free_port

COMMANDS = ["broker", "stub-sglang", "produce", "generate", "sink", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: eaglefeed " + command in out
    assert out.count("--") >= 2


def test_environment_supplies_defaults_and_flags_win(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_BOOTSTRAP_SERVERS", "kafka.example:9092")
    monkeypatch.setenv("EAGLEFEED_TOPIC_PREFIX", "envprefix")
    args = build_parser().parse_args(["sink", "--output", "x"])
    assert args.bootstrap_servers == "kafka.example:9092" and args.topic_prefix == "envprefix"
    args = build_parser().parse_args(["sink", "--output", "x", "--topic-prefix", "flag"])
    assert args.topic_prefix == "flag"


def test_broker_start_status_stop(tmp_path):
    port = str(free_port())
    flags = ["--data-dir", str(tmp_path / "b"), "--port", port, "--cache-dir", str(cache_dir())]
    started = run_cli("broker", "start", *flags, timeout=180)
    assert started.returncode == 0, started.stderr
    assert f"127.0.0.1:{port}" in started.stdout
    assert run_cli("broker", "status", *flags, timeout=60).returncode == 0
    assert (tmp_path / "b" / "logs" / "server.log").read_text().count("Kafka Server started") == 1
    stopped = run_cli("broker", "stop", *flags, timeout=120)
    assert "stopped" in stopped.stdout
    assert run_cli("broker", "status", *flags, timeout=60).returncode == 3


def test_broker_status_and_stop_say_where_they_looked_when_no_broker_runs(tmp_path):
    """From another folder the relative default --data-dir finds nothing: the line names what it checked."""
    port = str(free_port())
    here = tmp_path / "elsewhere"
    here.mkdir()
    status = run_cli("broker", "status", "--port", port, cwd=here, timeout=60)
    assert status.returncode == 3, status.stderr
    looked = here.resolve() / ".eaglefeed" / "broker"
    assert status.stdout == (f"not running: no broker.pid in {looked}, and nothing listens on "
                             f"127.0.0.1:{port} (--data-dir and --port say where to look)\n")
    stale = tmp_path / "b"
    stale.mkdir()
    (stale / "broker.pid").write_text("999999999")  # the broker was killed; its pid file stayed
    stop = run_cli("broker", "stop", "--data-dir", str(stale), "--port", port, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith(f"no broker running: {stale.resolve() / 'broker.pid'} names pid 999999999, "
                                  f"which is not running, and nothing listens on 127.0.0.1:{port}")
