"""The progress bar: drawn only when enabled, with rate, share done and ETA."""

from __future__ import annotations

import io

from eaglefeed.producers.progress import Progress
from eaglefeed.producers.publisher import ProduceSummary


def test_the_bar_shows_rate_share_and_eta_and_erases_itself():
    out = io.StringIO()
    bar = Progress(enabled=True, total_bytes=1000, stream=out)
    bar.started -= 10
    bar.update(published=500, bad=3, skipped=2, nbytes=250)
    text = out.getvalue()
    assert text.startswith("\r") and "published 500" in text and "50/s" in text
    assert "25.0%" in text and "ETA 0:00:30" in text and "bad 3" in text and "skipped 2" in text
    bar.close()
    assert out.getvalue().endswith("\r")


def test_a_disabled_bar_writes_nothing():
    out = io.StringIO()
    bar = Progress(enabled=False, total_bytes=None, stream=out)
    bar.update(published=5, bad=0, skipped=0, nbytes=10)
    bar.close()
    assert out.getvalue() == "" and bar.bytes_done == 10


def test_the_summary_line_counts_everything():
    s = ProduceSummary(rows=10, published=7, prompt_tokens=70, skipped_by_reason={"duplicate": 1},
                       dead_lettered=2, bad_by_reason={"invalid_json": 2})
    assert s.describe() == ("read 10 rows: published 7 prompts (70 tokens); skipped 1 (duplicate=1); "
                            "dead-lettered 2 (invalid_json=2)")
