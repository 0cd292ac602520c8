"""Waiting in tests: ``wait_until`` a condition holds, and the generate worker run on a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.generate import run_worker
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.lifecycle import StopSignal

MAX_POLL = 0.1
"""Seconds between two checks at the most (they start at 5 ms and double: cheap checks stay quick,
a check that reads a topic is not repeated hundreds of times a second)."""


def wait_until(predicate: Callable[[], object], *, timeout: float = 10.0,
               what: str = "the condition") -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds.

    Args:
        predicate: the check.
        timeout: seconds to wait at most.
        what: what is waited for, for the failure message.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(pause)
        pause = min(pause * 2, MAX_POLL)


class WorkerThread:
    """``run_worker(cfg)`` on a daemon thread, started at once; ``stop`` asks it to stop.

    Args:
        cfg: the worker's settings.
        clients: the Kafka clients (the fake broker in unit tests); None connects to ``cfg.kafka``.
        transport: the HTTP transport to the servers (a scripted server in unit tests).
        registry: where its metrics go (read with :meth:`metric`); None: a registry of its own.
    """

    def __init__(self, cfg: WorkerConfig, *, clients: Any = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.cfg = cfg
        self.stop = StopSignal()
        self.registry = CollectorRegistry() if registry is None else registry
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(clients, transport), daemon=True)
        self.thread.start()

    def _run(self, clients: Any, transport: httpx.AsyncBaseTransport | None) -> None:
        try:
            self.result["finished"] = run_worker(self.cfg, stop=self.stop, registry=self.registry,
                                                 clients=clients, transport=transport)
        except BaseException as exc:  # noqa: BLE001 - surfaced by join()
            self.result["error"] = exc

    def join(self, timeout: float = 10) -> int:
        """Wait for the worker's end; returns what it finished, re-raising what it raised."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        if "error" in self.result:
            raise self.result["error"]
        return int(self.result["finished"])

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the worker's registry (0 when it has none)."""
        return self.registry.get_sample_value(name, labels) or 0.0
