"""A soak: tens of thousands of prompts with SGLang faults on, every process's memory sampled."""

from __future__ import annotations

from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import SGLANG_FAULTS, Settings, execute


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """``settings.soak_prompts`` prompts (a tenth with ``quick``), fed at about 160 a second."""
    prompts = max(1000, settings.soak_prompts // 10) if settings.quick else settings.soak_prompts
    shape = Shape(prompts=prompts, standins=2, standin_flags=SGLANG_FAULTS, hostile_lines=30,
                  garbage_prompts=10, garbage_generations=10, feed_seconds=prompts / 160,
                  timeout=max(600.0, prompts / 20), seed=55)

    def act(pipe: Pipeline) -> None:
        pipe.wait(1.0)

    return execute("soak", shape, broker, root, act, keep_memory=True)
