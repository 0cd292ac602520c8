"""One clear line for the small mistakes: a busy broker port, mistyped dataset paths, unwritable outputs."""

from __future__ import annotations

import socket

import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import BrokerError, ConfigError
from eaglefeed.core.paths import check_writable_file
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.localbroker import BrokerStatus


def test_broker_start_on_another_port_says_where_the_running_broker_is(monkeypatch, tmp_path, capsys):
    running = BrokerStatus(running=True, pid=42, bootstrap_servers="127.0.0.1:9092", data_dir=tmp_path)
    monkeypatch.setattr(localbroker, "status", lambda _dir: running)
    monkeypatch.setattr(localbroker, "start", lambda **_kw: pytest.fail("must not start a second broker"))
    assert main(["broker", "start", "--port", "9192", "--data-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "a broker already runs (pid 42) at 127.0.0.1:9092" in out and "port 9192" in out
    assert main(["broker", "start", "--port", "9092", "--data-dir", str(tmp_path)]) == 0
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.parametrize(("action", "code"), [("status", 3), ("stop", 1)])
def test_status_and_stop_elsewhere_say_a_broker_listens_on_the_port(tmp_path, capsys, action, code):
    """The default --data-dir is relative: from another folder there is no broker *there*."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["broker", action, "--port", str(port), "--data-dir", str(tmp_path / "b")]) == code
    out = capsys.readouterr().out
    assert f"something listens on 127.0.0.1:{port}" in out and "another directory" in out
    assert main(["broker", action, "--port", str(port), "--data-dir", str(tmp_path / "b")]) in (0, 3)
    assert capsys.readouterr().out.startswith(("not running: ", "no broker running: "))


def test_a_port_taken_by_another_process_is_refused_before_java_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} on 127.0.0.1 is in use"):
            localbroker.start(data_dir=tmp_path / "b", port=port, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("argv", [["compact", "{d}"], ["stats", "{d}"],
                                  ["export", "{d}", "--format", "specforge", "--out", "{o}"]])
def test_a_mistyped_dataset_path_is_one_line_and_never_created(tmp_path, caplog, argv):
    missing = tmp_path / "typo"
    assert main([a.format(d=missing, o=tmp_path / "x.jsonl") for a in argv]) == 1
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"{missing} is not an eaglefeed dataset (no manifest.jsonl)"]
    assert not missing.exists()


def test_unwritable_outputs_are_one_clear_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^--out .*: cannot write there \(no folder "):
        check_writable_file(tmp_path / "nope" / "x.jsonl", "--out")
    with pytest.raises(ConfigError, match=r"^--plot .*: cannot write there \(it is a folder\)"):
        check_writable_file(tmp_path, "--plot")
    check_writable_file(tmp_path / "ok.png", "--plot")
