"""SIGKILL the producer, a random worker and the sink at random moments, and start each again."""

from __future__ import annotations

from pathlib import Path

from reliability.broker import Broker
from reliability.pipeline import Pipeline, Shape
from reliability.report import Result
from reliability.scenarios.common import Settings, execute


def run(broker: Broker, root: Path, settings: Settings) -> Result:
    """Kill each kind of process at least once while prompts come in, with hidden-state capture on.

    The next kill waits until the pipeline caught up, so each recovery time stands alone. Every
    row must also reference hidden states that exist and match, and ``gc`` must leave no file
    that no row names (``Outcome.state_problems``, ``state_orphans``).
    """
    quick = settings.quick
    shape = Shape(prompts=600 if quick else 3000, feed_seconds=30 if quick else 150, seed=11, capture=True)

    def act(pipe: Pipeline) -> None:
        rng = pipe.rng
        kinds = rng.sample(["producer", "worker", "sink"], 3)
        while len(kinds) < (3 if quick else 10):
            kinds.append(rng.choice(["producer", "worker", "worker", "sink"]))
        for kind in kinds:
            pipe.wait(rng.uniform(1.5, 4.5))
            name = f"worker-{rng.randrange(shape.workers)}" if kind == "worker" else kind
            pipe.settle(pipe.kill(name, down=rng.uniform(0.2, 2.0), stage=kind))

    return execute("kills", shape, broker, root, act)
