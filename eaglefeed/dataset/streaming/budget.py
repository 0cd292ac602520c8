"""What the workers say of ``--hidden-states-budget``: a small file per worker, ``DATASET/budget/<id>.json``.

``status`` reads them to show the budget beside what it measures of the store; a worker rewrites
its file when it pauses or resumes and every :data:`HEARTBEAT_SECONDS`, so a file that stops
changing is a worker that stopped (``status`` leaves it out after :data:`STALE_SECONDS`). In a
dataset whose home is an object store the files are objects of the store at the same paths, so
``status`` on any host sees every worker's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eaglefeed.dataset.store import ObjectStore

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


def budget_rel(worker_id: str) -> str:
    """The worker's file, as a path in the dataset."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in worker_id)
    return f"{BUDGET_FOLDER}/{name}.json"


def write_budget(root: Path | None, budget: WorkerBudget, *, store: ObjectStore | None = None) -> None:
    """Replace the worker's file (atomically: a reader sees the old or the new one), in ``store`` if given."""
    data = (json.dumps({"worker_id": budget.worker_id, "budget_bytes": budget.budget_bytes,
                        "paused": budget.paused, "at": budget.at}) + "\n").encode()
    rel = budget_rel(budget.worker_id)
    if store is not None:
        store.put_bytes(rel, data)
        return
    assert root is not None
    path = Path(root) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_budgets(root: Path | None, *, store: ObjectStore | None = None,
                 now: float | None = None) -> list[WorkerBudget]:
    """The budgets of the workers whose file changed within :data:`STALE_SECONDS` (in ``store`` if given)."""
    now = time.time() if now is None else now
    if store is not None:
        texts = [store.get_bytes(rel) for rel in store.paths(BUDGET_FOLDER) if rel.endswith(".json")]
    else:
        assert root is not None
        texts = []
        for path in sorted((Path(root) / BUDGET_FOLDER).glob("*.json")):
            try:
                texts.append(path.read_bytes())
            except OSError:
                continue  # being replaced
    found = []
    for text in texts:
        budget = _parse(text)
        if budget is not None and now - budget.at <= STALE_SECONDS:
            found.append(budget)
    return found


def _parse(text: bytes | None) -> WorkerBudget | None:
    if text is None:
        return None  # deleted between the listing and the read
    try:
        data = json.loads(text)
        return WorkerBudget(worker_id=str(data["worker_id"]), budget_bytes=int(data["budget_bytes"]),
                            paused=bool(data["paused"]), at=float(data["at"]))
    except (ValueError, KeyError, TypeError):
        return None  # not ours
