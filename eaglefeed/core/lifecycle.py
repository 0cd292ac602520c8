"""Signal handling: the first SIGINT/SIGTERM asks for a clean stop, the second exits at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Protocol

log = logging.getLogger(__name__)
_installed: list[StopSignal] = []  # the process's signal-driven flag, once a CLI installed one


class StopFlag(Protocol):
    """Anything with ``is_set()`` (``threading.Event``, :class:`StopSignal`)."""

    def is_set(self) -> bool: ...  # noqa: D102


def stop_requested() -> bool:
    """Whether the process's installed :class:`StopSignal` (if any) was set.

    Long start-up waits (e.g. connecting to Kafka) check it, so that a first Ctrl-C stops them too.
    """
    return any(flag.is_set() for flag in _installed)


class StopSignal:
    """A stop flag set by SIGINT/SIGTERM; a second signal ends the process immediately.

    Use :meth:`install` in the main thread of a CLI process; tests can call :meth:`set`.
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def install(self) -> StopSignal:
        """Route SIGINT and SIGTERM to this flag; returns self."""
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        _installed[:] = [self]
        return self

    def set(self) -> None:
        """Ask for a clean stop."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until a stop is asked for."""
        return self._event.wait(timeout)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._event.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s: finishing in-flight work, then stopping", signal.Signals(signum).name)
        self._event.set()
