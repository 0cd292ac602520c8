"""SGLang faults all at once on two servers, and one of the two down for a while."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import SGLANG_FAULTS, Settings, execute


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """Two samples per prompt; server 1 is SIGKILLed and comes back after 8 s (quick) or 30 s."""
    quick = settings.quick
    shape = Shape(prompts=400 if quick else 2000, samples=2, standins=2, standin_flags=SGLANG_FAULTS,
                  feed_seconds=25 if quick else 80, seed=33)

    def act(pipe: Pipeline) -> None:
        pipe.wait(pipe.rng.uniform(3.0, 5.0))
        fault = pipe.kill("sglang-1", down=8.0 if quick else 30.0, stage="sglang")
        fault.recovery = back_in_rotation(pipe, pipe.standin_urls[1], since=fault.ended)

    return execute("sglang-faults", shape, broker, root, act)


def back_in_rotation(pipe: Pipeline, url: str, *, since: float, timeout: float = 60.0) -> float | None:
    """Seconds from ``since`` until the restarted server answered a /generate request again."""
    start = served(url)
    while time.monotonic() - since < timeout and pipe.feeding:
        pipe.wait(0.2)
        if served(url) > start:
            return time.monotonic() - since
    return float("inf") if pipe.feeding else None  # None: the work ran out before it could be seen


def served(url: str) -> float:
    """The server's ``sglang:num_requests_total``."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    found = re.search(r"^sglang:num_requests_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, flags=re.M)
    return float(found.group(1)) if found else 0.0
