"""``status --output DIR``'s hidden-states lines: stored, consumed by every trainer group, the budget."""

from __future__ import annotations

import time

import eaglefeed
from eaglefeed.dataset.streaming.budget import WorkerBudget, write_budget
from eaglefeed.ops.states_status import read_states
from tests.unit.dataset.test_stream import add_segment


def test_the_lines_show_stored_consumed_and_the_live_workers_budget(tmp_path):
    root = tmp_path / "ds"
    assert read_states(root) is None  # no store: no line
    add_segment(root, range(4))
    view = read_states(root)
    assert view is not None and "no trainer group subscribed" in view.lines()[0] and len(view.lines()) == 1
    trainer = eaglefeed.stream(root, group="draft")
    list(trainer)
    trainer.state_dict()
    write_budget(root, WorkerBudget(worker_id="host-1", budget_bytes=10**6, paused=True, at=time.time()))
    write_budget(root, WorkerBudget(worker_id="gone", budget_bytes=10**6, paused=False, at=time.time() - 600))
    view = read_states(root)
    assert view is not None
    first, second = view.lines()
    size = view.usage.stored_bytes
    assert view.usage.consumed_bytes == size and "consumed by every trainer group (draft)" in first
    assert first.endswith("0 B not yet")
    assert second == ("  budget 1.0 MB (--hidden-states-budget): 0% used, 1 of 1 workers paused, "
                      "waiting for trainers")
