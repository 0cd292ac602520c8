"""The scenarios, in the order the suite runs them; each is ``run(broker, root, settings) -> Result``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reliability.broker import Broker
from reliability.report import Result
from reliability.scenarios import (
    broker_restart,
    cluster,
    hostile,
    kills,
    nemesis,
    pauses,
    sglang_faults,
    soak,
)
from reliability.scenarios.common import Settings

Scenario = Callable[[Broker, Path, Settings], Result]

SCENARIOS: dict[str, Scenario] = {
    "kills": kills.run,
    "broker-restart": broker_restart.run,
    "sglang-faults": sglang_faults.run,
    "hostile-input": hostile.run,
    "sink-pause": pauses.run_sink_pause,
    "worker-pause": pauses.run_worker_pause,
    "soak": soak.run,
    "leader-kill": cluster.run_leader_kill,
    "leader-kill-eos": cluster.run_leader_kill_exactly_once,
    "controller-kill": cluster.run_controller_kill,
    "broker-down": cluster.run_broker_down,
    "nemesis": nemesis.run,
}
QUICK = ("kills", "broker-restart", "sglang-faults", "hostile-input", "sink-pause", "worker-pause")
"""What ``--quick`` (CI) runs: everything but the soak and the three-node cluster scenarios (their
own ``--quick`` form runs with ``--only``; ``tests/integration/test_cluster_faults.py`` runs one)."""
