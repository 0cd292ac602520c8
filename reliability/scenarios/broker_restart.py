"""Stop the broker mid-run and start it again: every process must reconnect by itself."""

from __future__ import annotations

from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import Settings, execute


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """One restart (quick) or two; the broker stays down 5 s (quick) or 15 s each time."""
    quick = settings.quick
    shape = Shape(prompts=500 if quick else 2000, feed_seconds=15 if quick else 50, seed=22)

    def act(pipe: Pipeline) -> None:
        pipe.wait_until_flowing()  # a restart before the first offset reading has no recovery to measure
        for _ in range(1 if quick else 2):
            pipe.wait(pipe.rng.uniform(4.0, 7.0))
            pipe.settle(pipe.restart_broker(down=5.0 if quick else 15.0))

    return execute("broker-restart", shape, broker, root, act)
