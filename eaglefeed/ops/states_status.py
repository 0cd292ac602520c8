"""``status --output DIR``'s hidden-states line: bytes stored, consumed by every trainer group, the budget.

With ``--output s3://bucket/prefix`` the store is measured and the records and budget files are
read from it: what the workers and trainers of every host wrote there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eaglefeed.dataset.hidden_states import STORE
from eaglefeed.dataset.streaming.budget import WorkerBudget, read_budgets
from eaglefeed.dataset.streaming.usage import StatesUsage, human_bytes, measure

if TYPE_CHECKING:
    from eaglefeed.dataset.store import ObjectStore


@dataclass(frozen=True)
class StatesView:
    """The dataset's hidden-state store as measured now, and the budgets its live workers hold."""

    usage: StatesUsage
    budgets: tuple[WorkerBudget, ...]

    def lines(self) -> list[str]:
        """The status screen's lines."""
        u = self.usage
        groups = ", ".join(u.groups) if u.groups else "no trainer group subscribed"
        lines = [f"hidden states: {human_bytes(u.stored_bytes)} stored in {u.stored_files} files, "
                 f"{human_bytes(u.consumed_bytes)} consumed by every trainer group ({groups}), "
                 f"{human_bytes(u.unconsumed_bytes)} not yet"]
        if self.budgets:
            budget = max(b.budget_bytes for b in self.budgets)
            paused = sum(b.paused for b in self.budgets)
            state = (f"{paused} of {len(self.budgets)} workers paused, waiting for trainers" if paused
                     else f"{len(self.budgets)} workers fetching")
            lines.append(f"  budget {human_bytes(budget)} (--hidden-states-budget): "
                         f"{100 * u.unconsumed_bytes / budget:.0f}% used, {state}")
        return lines


def read_states(root: Path, *, store: ObjectStore | None = None) -> StatesView | None:
    """The states of the dataset ``root`` (whose home is ``store`` if given); None when it has none."""
    if store is not None:
        view = StatesView(usage=measure(None, store=store), budgets=tuple(read_budgets(None, store=store)))
        return view if view.usage.stored_files or view.usage.groups or view.budgets else None
    if not (Path(root) / STORE).is_dir():
        return None
    return StatesView(usage=measure(root), budgets=tuple(read_budgets(root)))
