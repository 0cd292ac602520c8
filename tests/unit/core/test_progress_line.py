"""The progress line of generate and sink: every N seconds, done, rate, lag, ETA (issue 27 item 8)."""

from __future__ import annotations

import logging

import pytest

from eaglefeed.core.progress import ProgressLine, duration_text, eta_text


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_line_is_due_every_n_seconds_and_says_done_rate_lag_and_eta(caplog):
    clock = Clock()
    line = ProgressLine(stage="generate", unit="prompts", seconds=10, clock=clock)
    assert not line.due()
    clock.t += 9.9
    assert not line.due()
    clock.t += 0.1
    assert line.due()
    with caplog.at_level(logging.INFO, logger="eaglefeed.progress"):
        text = line.report(done=400, lag=3600, pending=400)
    assert text == "generate: 400 prompts done, 40.0/s, lag 3,600 (+400 in flight), ETA 1m40s"
    assert caplog.records[-1].levelno == logging.INFO and caplog.records[-1].getMessage() == text
    assert not line.due()  # the next one is counted from this one
    clock.t += 10
    assert line.due()


def test_the_rate_is_measured_over_the_last_minute_not_since_the_start():
    clock = Clock()
    line = ProgressLine(stage="sink", unit="records", seconds=10, pending_word="buffered", clock=clock)
    done = 0
    for _ in range(10):  # 100 s at 50/s ...
        clock.t += 10
        done += 500
        line.report(done=done, lag=None)
    for _ in range(6):  # ... then a minute at 10/s
        clock.t += 10
        done += 100
        text = line.report(done=done, lag=1000, pending=200, detail="5,600 rows written")
    assert line.rate() == pytest.approx(10.0)
    assert text == ("sink: 5,600 records (5,600 rows written) done, 10.0/s, lag 1,000 (+200 buffered), "
                    "ETA 2m00s")


def test_unknown_lag_caught_up_and_a_stall_are_said_as_such():
    clock = Clock()
    line = ProgressLine(stage="generate", unit="prompts", seconds=10, clock=clock)
    clock.t += 10
    assert line.report(done=0, lag=None) == "generate: 0 prompts done, 0.0/s, lag unknown"
    clock.t += 10
    assert line.report(done=0, lag=5).endswith("lag 5, ETA unknown (nothing finished lately)")
    clock.t += 10
    assert line.report(done=20, lag=0).endswith("lag 0, caught up")


@pytest.mark.parametrize("seconds", [0, None])
def test_zero_switches_it_off(seconds):
    clock = Clock()
    line = ProgressLine(stage="sink", unit="records", seconds=seconds, clock=clock)
    clock.t += 1e6
    assert not line.due()


@pytest.mark.parametrize(("seconds", "text"), [(0.2, "1s"), (45, "45s"), (185, "3m05s"), (7620, "2h07m"),
                                               (3 * 86400 + 4 * 3600, "3d04h")])
def test_durations_read_in_two_units_at_most(seconds, text):
    assert duration_text(seconds) == text
    assert eta_text(10, 10 / seconds) == f"ETA {text}"


def test_the_readme_shows_the_lines_as_they_are():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    clock = Clock()
    worker = ProgressLine(stage="generate", unit="prompts", seconds=10, clock=clock)
    sink = ProgressLine(stage="sink", unit="records", seconds=10, pending_word="buffered", clock=clock)
    clock.t += 60
    assert worker.report(done=2472, lag=3456, pending=512) + "\n" in readme
    assert sink.report(done=7230, lag=0, detail="7,218 rows written, 12 duplicates dropped") + "\n" in readme
    for needed in ("eaglefeed status", "--exit-when-idle", "eaglefeed broker stop", "~/.cache/eaglefeed",
                   ".eaglefeed/", "--progress-seconds"):
        assert needed in readme, needed
