"""free_port and wait_healthy against a real local HTTP server and real child processes."""

import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eaglefeed.devtools.startup import free_port, log_tail, wait_healthy


@pytest.fixture
def health_server():
    """A local server whose /health answers 503 until ``ready`` is set; yields (url, ready, hits)."""
    ready, hits = threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            self.send_response(200 if ready.is_set() and self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", ready, hits
    server.shutdown()
    server.server_close()


def test_free_port_can_be_listened_on():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_waits_through_503_until_health_is_200(health_server):
    url, ready, hits = health_server
    threading.Timer(0.3, ready.set).start()
    wait_healthy(url, timeout=10)
    assert ready.is_set() and len(hits) >= 2 and set(hits) == {"/health"}


def test_gives_up_after_the_timeout(health_server):
    url, _ready, _hits = health_server
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not answer /health with 200 within"):
        wait_healthy(url, timeout=0.3)
    assert time.monotonic() - started < 5


def test_fails_fast_with_the_log_when_the_process_died(tmp_path):
    log = tmp_path / "service.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "Traceback: port in use\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with code 3") as err:
        wait_healthy(f"http://127.0.0.1:{free_port()}", timeout=60, process=proc, log=log)
    assert time.monotonic() - started < 5
    assert "Traceback: port in use" in str(err.value) and "line 0\n" not in str(err.value)


def test_log_tail_without_a_log_is_empty(tmp_path):
    assert log_tail(None) == log_tail(tmp_path / "missing.log") == ""
    (tmp_path / "a.log").write_text("x\ny\nz\n")
    assert log_tail(tmp_path / "a.log", lines=2).endswith("\ny\nz")
