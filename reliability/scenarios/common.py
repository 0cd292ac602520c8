"""The frame every scenario shares: run the pipeline, let the scenario act, collect the result."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, ScenarioFailure, Shape
from reliability.report import Result


@dataclass(frozen=True)
class Settings:
    """How big the scenarios run: ``quick`` is the CI form; ``soak_prompts`` sizes the soak.

    ``leader_down``: seconds the ``leader-kill`` scenario leaves its node down (None: 60, or 10
    with ``quick``). ``nemesis_minutes``: how long the nemesis strikes (None: 10, or 2 with
    ``quick``); ``nemesis_seed`` seeds its schedule; ``nemesis_kinds`` limits its faults;
    ``nemesis_exactly_once`` runs its workers with ``generate --exactly-once``.
    """

    quick: bool = False
    soak_prompts: int = 20000
    leader_down: float | None = None
    nemesis_minutes: float | None = None
    nemesis_seed: int = 26
    nemesis_kinds: tuple[str, ...] | None = None  # None: every kind
    nemesis_exactly_once: bool = False


SGLANG_FAULTS = ("--fault-503-rate", "0.05", "--fault-reset-rate", "0.02", "--fault-hang-rate", "0.01",
                 "--fault-hang-seconds", "30", "--fault-abort-rate", "0.01",
                 "--fault-contaminate-rate", "0.01")
"""The issue's mix, on every stand-in: 5 % 503s, 2 % resets, 1 % hangs (past the workers' 5 s
request timeout), 1 % aborts, 1 % contaminated output_ids."""


def execute(name: str, shape: Shape, broker: Broker, root: Path, act: Callable[[Pipeline], None], *,
            keep_memory: bool = False) -> Result:
    """Start the pipeline, let ``act`` fault it, wait until settled, and return the result."""
    try:
        with Pipeline(name=name, shape=shape, broker=broker, root=root) as pipe:
            act(pipe)
            done = pipe.finish()
    except ScenarioFailure as exc:
        return Result(scenario=name, outcome=None, errors=[str(exc)])
    except Exception:  # noqa: BLE001 - one broken scenario must not stop the others
        return Result(scenario=name, outcome=None, errors=[traceback.format_exc()])
    return Result(scenario=name, outcome=done.outcome, faults=done.faults, errors=done.errors,
                  seconds=done.seconds, memory=done.monitor.memory if keep_memory else None, notes=done.notes)
