"""Starting local services (stand-ins, metrics, broker, object store): free ports, live pids, /health."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

LOG_LINES = 40
"""How much of a service's log an error about it quotes."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now, and so is the port after it.

    Chosen below Linux's ephemeral range (32768-60999 by default): a port the OS hands out
    can be taken a moment later by any outgoing connection, and a local broker also binds the
    next port for its controller.
    """
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        if bindable(host, port) and bindable(host, port + 1):
            return port
    with socket.socket() as sock:  # a crowded range: let the OS pick
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def bindable(host: str, port: int) -> bool:
    """True if ``host:port`` can be bound now (SO_REUSEADDR, as a server would)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_open(host: str, port: int) -> bool:
    """True if something accepts TCP connections on ``host:port`` now."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def process_alive(pid: int) -> bool:
    """True if process ``pid`` runs (a zombie child of ours is reaped and counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours still answers kill(0)
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
        except (OSError, IndexError):
            return True


def terminate(pid: int, *, timeout: float, poll: float = 0.1) -> None:
    """SIGTERM ``pid`` and wait until it is gone, SIGKILLing it once ``timeout`` seconds have passed."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(poll)


def wait_healthy(url: str, *, timeout: float = 60.0, process: subprocess.Popen[Any] | None = None,
                 log: Path | None = None) -> None:
    """Wait until ``GET {url}/health`` answers 200.

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:30000``.
        timeout: seconds to wait at most.
        process: the service's process: when it exits first, fail at once instead of waiting.
        log: the service's log file, whose last lines a failure quotes.

    Raises:
        RuntimeError: the process exited, or the service did not answer within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with code {process.returncode} before it "
                               f"answered /health{log_tail(log)}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{url} did not answer /health with 200 within {timeout:.0f}s{log_tail(log)}")
        time.sleep(0.1)


def log_tail(log: Path | None, lines: int = LOG_LINES) -> str:
    """The last ``lines`` lines of ``log`` after a header line, or "" without a log to read."""
    if log is None or not log.is_file():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last lines of {log} ---\n" + "\n".join(tail)
