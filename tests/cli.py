"""Running the ``eaglefeed`` CLI as a child process in tests: to its end, or in the background."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.launcher import spawn


def cli_args(*args: str) -> list[str]:
    """The argv of ``python -m eaglefeed ARGS`` under this interpreter."""
    return [sys.executable, "-m", "eaglefeed", *args]


def kafka_flags(kafka: KafkaConfig) -> list[str]:
    """``--bootstrap-servers`` and ``--topic-prefix`` of ``kafka``."""
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topic_prefix]


def run_cli(*args: str, timeout: float = 300.0, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``eaglefeed ARGS`` to its end, stdout and stderr captured as text.

    Args:
        args: the subcommand and its flags.
        timeout: seconds before the run is killed (``subprocess.TimeoutExpired``).
        kwargs: more of ``subprocess.run``'s keywords (``env``, ``cwd``, ``stdin``, ``text=False``...).
    """
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(cli_args(*args), timeout=timeout, **kwargs)


def start_cli(*args: str, log: Path | None = None, append: bool = False,
              **kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``eaglefeed ARGS`` in the background.

    Args:
        args: the subcommand and its flags.
        log: the file that takes stdout and stderr (stdin closed); without it, ``kwargs`` say where
            the output goes (``stdout=subprocess.PIPE``...), as for ``subprocess.Popen``.
        append: append to ``log`` instead of truncating it.
        kwargs: more of ``subprocess.Popen``'s keywords; with ``log`` only ``env``.
    """
    if log is not None:
        return spawn(args, log=log, append=append, **kwargs)
    return subprocess.Popen(cli_args(*args), **kwargs)
