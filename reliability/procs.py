"""Child processes of a reliability run: start, SIGKILL, restart, stop, and their memory."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from eaglefeed.devtools.launcher import spawn


class Proc:
    """One ``python -m eaglefeed`` process that can be killed and started again with the same arguments.

    Every start appends to the same log file, after a marker line, so the log tells the whole story.

    Args:
        name: a label such as ``worker-0`` (also the log file's name).
        args: the eaglefeed arguments (subcommand and flags).
        logs: the folder of the log files.
        env: extra environment variables.
    """

    def __init__(self, *, name: str, args: list[str], logs: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.args = args
        self.log = logs / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.started_at = 0.0
        self._stopping = False

    def start(self) -> Proc:
        """Start the process (again); returns self."""
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {self.starts + 1} at {time.strftime('%H:%M:%S')} ===\n".encode())
        self.popen = spawn(self.args, log=self.log, append=True, env=self.env)
        self.starts += 1
        self.started_at = time.monotonic()
        self._stopping = False
        return self

    @property
    def pid(self) -> int | None:
        """The pid of the running process, or None."""
        return self.popen.pid if self.alive and self.popen is not None else None

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.popen is not None and self.popen.poll() is None

    def crashed(self) -> int | None:
        """The exit code if the process ended without being asked to (None while all is well)."""
        if self.popen is None or self._stopping:
            return None
        return self.popen.poll()

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.popen is not None and self.popen.poll() is None:
            self._stopping = True
            self.popen.kill()
            self.popen.wait()
            self.kills += 1

    def pause(self) -> None:
        """SIGSTOP the process: it holds its sockets and state but runs nothing (a stall, a long GC)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM the process, wait up to ``timeout`` (then SIGKILL); returns its exit code."""
        if self.popen is None:
            return None
        self._stopping = True
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # a paused process would never see the SIGTERM
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
                return None
        return self.popen.returncode

    def current_log(self) -> str:
        """The log since the process's last start."""
        if not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace")
        return text[text.rfind("\n=== start "):]

    def tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the log."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def rss_mb(pid: int | None) -> float | None:
    """The resident set size of ``pid`` in MB (None if it is gone)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


