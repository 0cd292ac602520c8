"""Starting ``python -m eaglefeed`` child processes, and the SGLang stand-in on a port of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from eaglefeed.devtools.startup import free_port, wait_healthy

HOST = "127.0.0.1"
"""Where the stand-in listens (its own default)."""


def spawn(args: Sequence[str], *, log: Path | None = None, append: bool = False,
          env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Run ``python -m eaglefeed ARGS`` in the background, stdin closed.

    Args:
        args: the eaglefeed arguments (subcommand and flags).
        log: the file that takes stdout and stderr; None discards them.
        append: append to ``log`` instead of truncating it.
        env: the child's whole environment; None inherits this process's.

    Returns:
        The running process.
    """
    out: IO[bytes] | int = subprocess.DEVNULL
    if log is not None:
        out = open(log, "ab" if append else "wb")  # noqa: SIM115 - closed below, the child keeps its copy
    try:
        return subprocess.Popen([sys.executable, "-m", "eaglefeed", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=None if env is None else dict(env))
    finally:
        if not isinstance(out, int):
            out.close()


class StandinProcess:
    """One SGLang stand-in process (``eaglefeed stub-sglang``) on a port of its own; a context manager.

    It can be stopped (or killed) and started again on the same port, with other flags.

    Args:
        flags: stand-in flags after ``--port N``.
        port: the port; None picks a free one.
        log: the file that takes its output; None discards it.
    """

    def __init__(self, *, flags: Sequence[str] = (), port: int | None = None,
                 log: Path | None = None) -> None:
        self.flags = tuple(flags)
        self.port = free_port() if port is None else port
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def args(self) -> list[str]:
        """The eaglefeed arguments that start it."""
        return ["stub-sglang", "--port", str(self.port), *self.flags]

    def start(self, *, flags: Sequence[str] | None = None, log: Path | None = None,
              wait: bool = True) -> StandinProcess:
        """Start it (again) on its port; returns self.

        Args:
            flags: replace the flags given before.
            log: replace the log file given before.
            wait: wait until ``/health`` answers 200 (else call :meth:`wait_healthy` later).

        Raises:
            RuntimeError: the process exited, or did not answer in time (with ``wait``).
        """
        if flags is not None:
            self.flags = tuple(flags)
        if log is not None:
            self.log = log
        self.proc = spawn(self.args, log=self.log)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, *, timeout: float = 60.0) -> None:
        """Wait until ``/health`` answers 200, failing at once if the process exits first.

        Raises:
            RuntimeError: the process exited, or did not answer within ``timeout``.
        """
        wait_healthy(self.url, timeout=timeout, process=self.proc, log=self.log)

    @property
    def pid(self) -> int | None:
        """The pid of the process last started, or None."""
        return None if self.proc is None else self.proc.pid

    def kill(self) -> None:
        """SIGKILL it (a server that dies mid-run) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM it (in-flight requests get its shutdown's few seconds); SIGKILL after ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> StandinProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
