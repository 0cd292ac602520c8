"""Hostile input: a fuzzed prompt file, and raw garbage written straight into the topics."""

from __future__ import annotations

from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import Settings, execute


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """Every fuzzed line and every garbage record must end as a row or a dead letter, and no process dies."""
    quick = settings.quick
    shape = Shape(prompts=200 if quick else 1000, hostile_lines=45 if quick else 150,
                  garbage_prompts=24 if quick else 100, garbage_generations=16 if quick else 60,
                  feed_seconds=5 if quick else 20, seed=44)

    def act(pipe: Pipeline) -> None:
        pipe.wait(1.0)

    return execute("hostile-input", shape, broker, root, act)
