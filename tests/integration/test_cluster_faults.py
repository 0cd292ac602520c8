"""The reliability suite's ``leader-kill`` scenario in its quick form, on a three-node cluster of its own.

The node leading the most partitions is SIGKILLed under load (producer, two workers, sink, a
stand-in) and started again 10 s later: every prompt must be a row exactly once, every stage
must move again, and the node must rejoin the in-sync replicas. The other cluster scenarios
(``controller-kill``, ``broker-down``) and the 60 s form run in ``make reliability``.
"""

from __future__ import annotations

import pytest

from reliability.broker import Broker
from reliability.report import details
from reliability.scenarios import SCENARIOS
from reliability.scenarios.common import Settings
from tests.conftest import cache_dir

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_a_killed_leader_loses_and_doubles_nothing(tmp_path):
    unused = Broker(data_dir=tmp_path / "unused", cache_dir=cache_dir())  # the scenario starts its cluster
    result = SCENARIOS["leader-kill"](unused, tmp_path, Settings(quick=True))
    outcome = result.outcome
    assert outcome is not None and not result.errors, details(result)
    assert outcome.duplicates == 0 and outcome.missing == 0 and outcome.unexpected == 0, details(result)
    assert outcome.rows_out == outcome.units, details(result)  # nothing even dead-lettered
    (fault,) = result.faults
    assert set(fault.resume) == {"worker", "sink", "producer"}, details(result)
    assert all(t is not None and t < 60 for t in fault.resume.values()), details(result)
    assert any("back in every in-sync replica set" in note for note in result.notes), details(result)
    assert result.ok, details(result)
