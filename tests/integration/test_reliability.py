"""The reliability suite in its CI form: each quick scenario on a broker of its own; the books must balance.

The soak (tens of thousands of prompts) is left to ``make reliability``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from reliability.broker import Broker
from reliability.report import Result, details
from reliability.scenarios import QUICK, SCENARIOS
from reliability.scenarios.common import Settings
from tests.conftest import cache_dir

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker of the module's own: one scenario stops and starts it."""
    own = Broker(data_dir=tmp_path_factory.mktemp("reliability-broker"), cache_dir=cache_dir()).start()
    try:
        yield own
    finally:
        own.stop()


def assert_balanced(result: Result) -> None:
    outcome = result.outcome
    assert outcome is not None and not result.errors, details(result)
    assert outcome.duplicates == 0 and outcome.missing == 0 and outcome.unexpected == 0, details(result)
    assert outcome.rows_out + outcome.dead_lettered == outcome.units, details(result)
    assert result.ok, details(result)


@pytest.mark.parametrize("name", QUICK)
def test_quick_scenario_loses_and_doubles_nothing(name, broker, tmp_path):
    broker.start()  # a no-op unless an earlier scenario failed while it was down
    result = SCENARIOS[name](broker, tmp_path, Settings(quick=True))
    assert_balanced(result)
    outcome = result.outcome
    assert outcome is not None
    if name == "kills":
        assert {f.stage for f in result.faults} == {"producer", "worker", "sink"}
        assert outcome.rows_out == outcome.units  # kills lose nothing and dead-letter nothing
    elif name == "broker-restart":
        assert [f.stage for f in result.faults] == ["broker"]
        assert result.recovery is not None and result.recovery < 120, details(result)
    elif name == "sglang-faults":
        assert result.faults[0].recovery not in (None, float("inf")), details(result)
        assert outcome.rows_out >= 0.95 * outcome.units  # retries absorb the faults
    elif name in ("sink-pause", "worker-pause"):  # SIGSTOP past the session timeout, then SIGCONT
        assert [f.stage for f in result.faults] == [name.split("-")[0]]
        assert result.recovery is not None and result.recovery < 60, details(result)
        assert outcome.rows_out == outcome.units  # the other member took over; nothing doubled
    elif name == "hostile-input":
        kinds = set(outcome.letter_kinds)
        assert {"produce:invalid_json", "produce:invalid_utf8", "produce:wrong_type", "produce:unknown_role",
                "generate:undecodable_prompt", "generate:invalid_prompt", "sink:undecodable_generation",
                "sink:invalid_generation"} <= kinds, details(result)
        assert outcome.rows_out >= 200  # every good prompt and the valid oddities became rows


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EAGLEFEED_RELIABILITY_SOAK"),
                    reason="the soak runs in `make reliability` (EAGLEFEED_RELIABILITY_SOAK=1 runs it here)")
def test_soak_memory_stays_flat(broker, tmp_path):
    result = SCENARIOS["soak"](broker, tmp_path, Settings(soak_prompts=20000))
    assert_balanced(result)
    assert result.memory_flat, details(result)
