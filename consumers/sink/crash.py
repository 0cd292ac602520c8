"""Test-only crash hook: SIGKILL the sink at a named step of its commit sequence."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)


class CrashHook:
    """Kill this process at a named step of the commit sequence (``eaglefeed.consumers.sink.checkpoint``).

    ``EAGLEFEED_SINK_CRASH_AT=STEP[:N]`` kills at the N-th time (default 1st) the sink reaches
    STEP: ``after_dead_letter``, ``after_rename``, ``after_manifest`` or ``after_commit``.

    Args:
        spec: ``STEP[:N]``, or None for a hook that never fires.

    Raises:
        ValueError: STEP is not one of :attr:`STEPS`.
    """

    STEPS = ("after_dead_letter", "after_rename", "after_manifest", "after_commit")

    def __init__(self, spec: str | None) -> None:
        self.step, _, count = (spec or "").partition(":")
        if self.step and self.step not in self.STEPS:
            raise ValueError(f"unknown crash step {self.step!r}; one of {self.STEPS}")
        self.left = int(count or 1)

    def __call__(self, step: str) -> None:
        """Count ``step``; SIGKILL this process when it is the N-th time of the configured step."""
        if step == self.step:
            self.left -= 1
            if self.left <= 0:
                log.warning("test crash hook: SIGKILL at %s", step)
                os.kill(os.getpid(), signal.SIGKILL)
