"""The stage wiring: metrics served and lag reported while a stage runs; the exit-when-idle clock."""

import pytest
from prometheus_client import CollectorRegistry

import eaglefeed.stage as stage
from eaglefeed.config import KafkaConfig
from eaglefeed.metrics import WorkerMetrics


class Reporter:
    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.running = kwargs, False
        Reporter.made.append(self)

    def start(self):
        self.running = True
        return self

    def stop(self):
        self.running = False


@pytest.fixture
def served(monkeypatch):
    Reporter.made = []
    ports = []
    monkeypatch.setattr(stage, "LagReporter", Reporter)
    monkeypatch.setattr(stage, "serve_metrics", lambda registry, port: ports.append((registry, port)))
    return ports


def test_metrics_are_served_and_lag_is_reported_while_the_stage_runs(served):
    registry = CollectorRegistry()
    with pytest.raises(RuntimeError):
        with stage.stage_metrics(WorkerMetrics.create, kafka=KafkaConfig(), stage="generate", group="g",
                                 topic="t", port=9100, registry=registry) as metrics:
            assert isinstance(metrics, WorkerMetrics)
            (reporter,) = Reporter.made
            assert reporter.running and reporter.kwargs["group"] == "g"
            assert reporter.kwargs["stage"] == "generate" and reporter.kwargs["topic"] == "t"
            raise RuntimeError("the stage failed")
    assert not reporter.running  # stopped all the same
    assert served == [(registry, 9100)]


def test_without_a_port_there_is_no_lag_reporter(served):
    with stage.stage_metrics(WorkerMetrics.create, kafka=KafkaConfig(), stage="sink", group="g", topic="t",
                             port=None) as metrics:
        assert metrics.requests is not None
    assert Reporter.made == [] and served[0][1] is None


def test_the_idle_clock_expires_only_after_seconds_without_activity():
    now = [100.0]
    clock = stage.IdleClock(seconds=5, clock=lambda: now[0])
    now[0] = 104.9
    assert not clock.expired()
    clock.active()
    now[0] = 109.8
    assert not clock.expired()
    assert clock.expired(110.0)
    never = stage.IdleClock(seconds=None, clock=lambda: now[0])
    assert not never.expired(1e9)
