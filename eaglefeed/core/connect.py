"""Reach the broker at start-up: bounded in time, stoppable by Ctrl-C, one line instead of kafka-python's.

kafka-python's constructors bootstrap for up to 30 s, logging every refused connection (about
one line a second) and ending in ``KafkaTimeoutError: Unable to bootstrap``. :func:`connect`
builds a client in short attempts (so that a first Ctrl-C is seen within
:data:`ATTEMPT_SECONDS`) until ``KafkaConfig.connect_timeout`` passes, keeps kafka-python's
bootstrap lines out of the log meanwhile (remembering the last one as the cause), and fails
with :class:`KafkaUnreachableError` naming the address and the cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kafka.errors import KafkaError

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import KafkaUnreachableError, StopRequestedError
from eaglefeed.core.lifecycle import stop_requested

log = logging.getLogger(__name__)

ATTEMPT_SECONDS = 2.0
"""Longest single bootstrap attempt (kafka-python's ``bootstrap_timeout_ms``)."""
MIN_ATTEMPT_SECONDS = 0.2
"""An attempt that fails faster than this is followed by a pause of this length."""
REPORT_EVERY = 15.0
"""Seconds between our own "still waiting for Kafka" lines."""
QUIETED_LOGGERS = ("kafka.net.manager", "kafka.net.connection", "kafka.net.transport", "kafka.net.inet",
                   "kafka.conn",
                   "kafka.client_async")

_Client = TypeVar("_Client")


def connect(build: Callable[[int], _Client], cfg: KafkaConfig, what: str,
            timeout: float | None = None) -> _Client:
    """Build a client, trying again while the broker cannot be reached.

    Args:
        build: makes the client; its argument is the bootstrap timeout of one attempt, in ms.
        cfg: the broker address and ``connect_timeout``.
        what: the client's role, for the log ("producer", "consumer", "admin client").
        timeout: seconds to keep trying (``cfg.connect_timeout`` when None).

    Raises:
        KafkaUnreachableError: no broker answered within the timeout.
        StopRequestedError: a stop (Ctrl-C, SIGTERM) was asked for meanwhile.
    """
    limit = cfg.connect_timeout if timeout is None else timeout
    started = time.monotonic()
    deadline = started + limit
    reported = started
    with _QUIET:
        while True:
            if stop_requested():
                raise StopRequestedError(f"stopped while connecting to Kafka at {cfg.bootstrap_servers}")
            began = time.monotonic()
            attempt = max(0.2, min(ATTEMPT_SECONDS, deadline - began))
            try:
                return build(int(attempt * 1000))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                now = time.monotonic()
                cause = _QUIET.last or repr(exc)
                if "Authentication" in cause:  # the broker answered and refused us: waiting will not help
                    raise KafkaUnreachableError(f"Kafka at {cfg.bootstrap_servers} refused the connection "
                                                f"({cause}): check the SASL/TLS settings") from None
                if now >= deadline:
                    raise KafkaUnreachableError(
                        f"cannot reach Kafka at {cfg.bootstrap_servers} (tried for {limit:.0f} s; last "
                        f"error: {cause}): check --bootstrap-servers, or wait longer with "
                        f"--connect-timeout") from None
                if now - reported >= REPORT_EVERY:
                    log.warning("still waiting for Kafka at %s for a %s (%.0f of %.0f s; last error: %s)",
                                cfg.bootstrap_servers, what, now - started, limit, cause)
                    reported = now
                if now - began < MIN_ATTEMPT_SECONDS:  # failed at once (e.g. DNS): do not spin
                    time.sleep(MIN_ATTEMPT_SECONDS)


class _QuietBootstrap(logging.Filter):
    """While a :func:`connect` runs, drop kafka-python's connection lines and keep the last cause."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._active = 0
        self.last: str | None = None

    def __enter__(self) -> None:
        with self._lock:
            self._active += 1
            self.last = None

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._active -= 1

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._active or record.levelno >= logging.CRITICAL:
            return True
        cause = _cause(record.getMessage())
        if cause is not None and "Authentication" not in (self.last or ""):  # the refusal says most
            self.last = cause
        return False


def _cause(message: str) -> str | None:
    """``KafkaConnectionError: 111 ECONNREFUSED`` out of kafka-python's connection lines."""
    if "Error" not in message or "Unable to bootstrap" in message:
        return None  # the timeout that ends an attempt says nothing about why
    parts = message.split(" (backoff")[0].split(": ")
    return ": ".join(parts[-2:])


_QUIET = _QuietBootstrap()
for _name in QUIETED_LOGGERS:
    logging.getLogger(_name).addFilter(_QUIET)
