"""What the workers say of ``--hidden-states-budget``: a small file per worker, ``DATASET/budget/<id>.json``.

``status`` reads them to show the budget beside what it measures of the store; a worker rewrites
its file when it pauses or resumes and every :data:`HEARTBEAT_SECONDS`, so a file that stops
changing is a worker that stopped (``status`` leaves it out after :data:`STALE_SECONDS`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

BUDGET_FOLDER = "budget"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 120.0


@dataclass(frozen=True)
class WorkerBudget:
    """One worker's budget and whether it is fetching prompts now."""

    worker_id: str
    budget_bytes: int
    paused: bool
    at: float  # seconds since the epoch


def write_budget(root: Path, budget: WorkerBudget) -> None:
    """Replace the worker's file (atomically: a reader sees the old or the new one)."""
    folder = Path(root) / BUDGET_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in budget.worker_id)
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"worker_id": budget.worker_id, "budget_bytes": budget.budget_bytes,
                               "paused": budget.paused, "at": budget.at}) + "\n", encoding="utf-8")
    tmp.replace(folder / f"{name}.json")


def read_budgets(root: Path, *, now: float | None = None) -> list[WorkerBudget]:
    """The budgets of the workers whose file changed within :data:`STALE_SECONDS`."""
    now = time.time() if now is None else now
    found = []
    for path in sorted((Path(root) / BUDGET_FOLDER).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            budget = WorkerBudget(worker_id=str(data["worker_id"]), budget_bytes=int(data["budget_bytes"]),
                                  paused=bool(data["paused"]), at=float(data["at"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours
        if now - budget.at <= STALE_SECONDS:
            found.append(budget)
    return found
