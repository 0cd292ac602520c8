"""What ``eaglefeed capture`` is asked to do: ``CaptureOptions``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglefeed.core.capture import CaptureSettings


@dataclass(frozen=True)
class CaptureOptions:
    """What ``eaglefeed capture`` does.

    Attributes:
        root: the dataset directory.
        urls: the capture-enabled vLLM servers.
        capture: layers, dtype and file wait (its ``store`` must be ``root/hidden_states``).
        concurrency: requests in flight over all servers.
        api_key: sent as ``Authorization: Bearer``.
        request_timeout: seconds per request.
        max_attempts: attempts per row before it is given up (left without states).
        retry_backoff: base seconds of the exponential backoff between attempts (full jitter).
        retry_backoff_max: the longest wait between attempts.
        connect_timeout: seconds a server may take to answer at start.
        eject_after: consecutive failures that take a server out of rotation (probed back in).
        probe_interval: seconds between health probes of a server out of rotation.
        progress_seconds: seconds between progress lines (0: none).
    """

    root: Path
    urls: tuple[str, ...]
    capture: CaptureSettings
    concurrency: int = 16
    api_key: str | None = None
    request_timeout: float = 600.0
    max_attempts: int = 5
    retry_backoff: float = 1.0
    retry_backoff_max: float = 30.0
    connect_timeout: float = 60.0
    eject_after: int = 5
    probe_interval: float = 5.0
    progress_seconds: float = 10.0
