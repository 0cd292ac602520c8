"""``--hidden-states-budget``: the room the budget leaves the worker's loop, and its two log lines."""

from __future__ import annotations

import asyncio
import logging

import eaglefeed
from eaglefeed.consumers.generate.backpressure import StatesBudget
from eaglefeed.dataset.streaming.budget import read_budgets
from tests.unit.dataset.test_stream import add_segment


def test_over_the_budget_there_is_no_room_until_a_trainer_consumes(tmp_path, caplog):
    root = tmp_path / "ds"
    add_segment(root, range(10))
    size = sum(p.stat().st_size for p in (root / "hidden_states").iterdir())
    budget = StatesBudget(root=root, budget=size, worker_id="w1")

    async def room(free: int) -> int:
        budget._measured = float("-inf")  # measure now (the loop measures every 0.25 s at most)
        return await budget.room(free)

    with caplog.at_level(logging.INFO):
        assert asyncio.run(room(8)) == 0 and budget.paused
        assert read_budgets(root)[0].paused
        trainer = eaglefeed.stream(root, group="draft")
        for _, _row in zip(range(3), trainer, strict=False):
            pass
        assert asyncio.run(room(8)) == 0  # delivered, not committed
        trainer.state_dict()
        assert asyncio.run(room(8)) == 8 and not budget.paused
    said = [r.getMessage() for r in caplog.records if "hidden states" in r.getMessage()]
    assert len(said) == 2 and "fetching no prompts" in said[0] and "fetching prompts again" in said[1]
    assert "draft" in said[1]


def test_under_the_budget_one_window_is_started_per_measurement(tmp_path):
    root = tmp_path / "ds"
    add_segment(root, range(2))
    budget = StatesBudget(root=root, budget=10**9, worker_id="w1")
    assert asyncio.run(budget.room(16)) == 16
    budget.took(10)
    assert asyncio.run(budget.room(16)) == 6  # no new measurement yet: what is left of the window
    budget.took(6)
    assert asyncio.run(budget.room(16)) == 0


def test_pauses_that_repeat_at_the_budget_are_said_once_a_minute(tmp_path, caplog):
    from eaglefeed.dataset.streaming.usage import StatesUsage

    budget = StatesBudget(root=tmp_path, budget=100, worker_id="w1")
    over, under = StatesUsage(stored_bytes=150, stored_files=1), StatesUsage(stored_bytes=50, stored_files=1)
    with caplog.at_level(logging.INFO):
        for _ in range(5):  # a trainer commits as fast as the workers fill: the budget flips
            budget._observe(over)
            budget._observe(under)
        budget._observe(over)
        assert len([r for r in caplog.records if "hidden states" in r.getMessage()]) == 2
        budget._said -= 61  # a minute later, still paused: said, with the pauses not said
        budget._observe(over)
    said = [r.getMessage() for r in caplog.records if "hidden states" in r.getMessage()]
    assert len(said) == 3 and "5 short pauses since the last line" in said[2]


def test_a_budget_is_a_size_with_an_optional_unit():
    import pytest

    from eaglefeed.core.capture import parse_bytes
    from eaglefeed.core.errors import ConfigError

    assert parse_bytes("500000000") == 500_000_000
    assert parse_bytes("200G") == parse_bytes("200GB") == 200 * 10**9
    assert parse_bytes("64GiB") == 64 * 2**30 and parse_bytes("1.5T") == 1_500_000_000_000
    with pytest.raises(ConfigError):
        parse_bytes("lots")


def test_a_store_that_does_not_answer_keeps_the_last_measurement(tmp_path, caplog):
    from eaglefeed.core.errors import StoreError
    from eaglefeed.dataset.streaming.usage import StatesUsage

    budget = StatesBudget(root=tmp_path, budget=100, worker_id="w1")
    budget._observe(StatesUsage(stored_bytes=150, stored_files=1))
    assert budget.paused

    def unreachable() -> StatesUsage:
        raise StoreError("s3://b/p: the store cannot be reached")

    budget.meter.measure = unreachable  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            budget._measured = float("-inf")
            assert asyncio.run(budget.room(8)) == 0 and budget.paused  # paused stays paused, no crash
    assert len([r for r in caplog.records if "cannot measure the store" in r.getMessage()]) == 1
