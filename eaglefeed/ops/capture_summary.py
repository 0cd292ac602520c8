"""What a capture run did: ``CaptureSummary``, its closing line and the progress line."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger("eaglefeed.ops.capture_states")  # the command's one logger, whichever module logs


@dataclass
class CaptureSummary:
    """What a run did."""

    total: int = 0  # rows without states found (over every pass)
    captured: int = 0  # rows whose states this run captured
    reused: int = 0  # rows whose file an earlier run left in the store
    failed: int = 0  # rows given up (left without states)
    requests: int = 0  # requests sent (attempts)
    files: int = 0  # Parquet files replaced
    rows_filled: int = 0  # rows that now carry their reference in the dataset
    already: int = 0  # rows that had states before the run
    failures: Counter[str] = field(default_factory=Counter)  # failed rows by kind
    first_failure: str = ""
    seconds: float = 0.0
    stopped: bool = False

    @property
    def done(self) -> int:
        """Rows with a checked file (captured or reused)."""
        return self.captured + self.reused

    def line(self) -> str:
        """The summary line the command prints at the end."""
        rate = self.done / self.seconds if self.seconds > 0 else 0.0
        text = (f"capture: {self.rows_filled} of {self.total} rows without states now have them "
                f"({self.captured} captured in {self.requests} requests, {self.reused} found in the store), "
                f"{self.files} files replaced, {self.failed} failed, {_clock(self.seconds)} "
                f"({rate:.1f} rows/s)")
        if self.failed:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items()))
            text += f"; failures: {kinds} (first: {self.first_failure}); run again to retry them"
        if self.stopped:
            text += "; stopped: run again to go on"
        return text

    def fail_rows(self, count: int, kind: str, message: str) -> None:
        """Count ``count`` rows given up for ``kind``, keep the first message, and log it as a warning."""
        self.failed += count
        self.failures[kind] += count
        if not self.first_failure:
            self.first_failure = message
        log.warning("capture: %s", message)


def progress_line(summary: CaptureSummary, elapsed: float) -> str:
    """``capture: 120/1000 rows (12.0 %), 8.1 rows/s, ETA 1m48s; 3 files replaced, 0 failed``."""
    done, total = summary.done, max(summary.total, 1)
    rate = done / elapsed if elapsed > 0 else 0.0
    left = max(summary.total - done - summary.failed, 0)
    eta = _clock(left / rate) if rate > 0 else "unknown"
    return (f"capture: {done}/{summary.total} rows ({100 * done / total:.1f} %), {rate:.1f} rows/s, "
            f"ETA {eta}; {summary.files} files replaced, {summary.failed} failed")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
