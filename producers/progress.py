"""A one-line progress bar on a terminal (rate, share of input bytes done, ETA); silent elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TextIO

REDRAW_SECONDS = 0.25


class Progress:
    """Redraws ``published N prompts · R/s · P% · ETA`` on stderr at most every 0.25 s.

    Args:
        enabled: draw at all (callers pass ``sys.stderr.isatty()``).
        total_bytes: the input size, for the share done and the ETA (None when unknown, e.g. stdin
            or ``--follow``).
        stream: where to draw.
    """

    def __init__(self, *, enabled: bool, total_bytes: int | None = None,
                 stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.total_bytes = total_bytes or None
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._width = 0
        self.bytes_done = 0

    def update(self, *, published: int, bad: int, skipped: int, nbytes: int = 0) -> None:
        """Count ``nbytes`` more input as done and redraw if it is time."""
        self.bytes_done += nbytes
        now = time.monotonic()
        if not self.enabled or now - self._drawn_at < REDRAW_SECONDS:
            return
        self._drawn_at = now
        self._draw(self.render(published=published, bad=bad, skipped=skipped, now=now))

    def render(self, *, published: int, bad: int, skipped: int, now: float | None = None) -> str:
        """The progress line for the given counts."""
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        parts = [f"published {published:,}", f"{published / elapsed:,.0f}/s"]
        if skipped:
            parts.append(f"skipped {skipped:,}")
        if bad:
            parts.append(f"bad {bad:,}")
        if self.total_bytes:
            share = min(self.bytes_done / self.total_bytes, 1.0)
            parts.append(f"{share:6.1%}")
            if share > 0:
                parts.append(f"ETA {_clock(elapsed * (1 - share) / share)}")
        return " · ".join(parts)

    def close(self) -> None:
        """Erase the bar."""
        if self.enabled and self._width:
            self._draw("")
            self.stream.write("\r")
            self.stream.flush()

    def _draw(self, text: str) -> None:
        pad = max(self._width - len(text), 0)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
