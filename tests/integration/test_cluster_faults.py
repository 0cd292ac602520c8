"""The reliability suite's ``leader-kill`` and ``nemesis`` scenarios, quick, each on a cluster of its own.

The node leading the most partitions is SIGKILLed under load (producer, two workers, sink, a
stand-in) and started again 10 s later: every prompt must be a row exactly once, every stage
must move again, and the node must rejoin the in-sync replicas. The nemesis strikes for two
minutes (about 3 minutes in all on the loaded 2-core machine). The other cluster scenarios
(``controller-kill``, ``broker-down``), the 60 s form and the 10-minute nemesis run in
``make reliability``.
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


def test_the_nemesis_loses_doubles_and_stalls_nothing(tmp_path):
    """Two minutes of overlapping faults (processes, nodes, the stand-in) on the cluster, with converse."""
    unused = Broker(data_dir=tmp_path / "unused", cache_dir=cache_dir())  # the scenario starts its cluster
    result = SCENARIOS["nemesis"](unused, tmp_path, Settings(quick=True))
    outcome = result.outcome
    assert outcome is not None and not result.errors, details(result)
    assert outcome.duplicates == 0 and outcome.missing == 0 and outcome.unexpected == 0, details(result)
    assert outcome.rows_out + outcome.dead_lettered == outcome.units, details(result)
    assert len(result.faults) >= 5, details(result)  # a strike every 15-25 s for two minutes
    stalls = [note for note in result.notes if note.startswith("longest stall after the faults healed")]
    assert stalls, details(result)  # and none past 60 s: that is an error of the result
    assert result.ok, details(result)
