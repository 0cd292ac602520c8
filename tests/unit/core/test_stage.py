"""The stage wiring: metrics served and lag reported while a stage runs; the exit-when-idle clock."""

import pytest
from kafka.errors import KafkaTimeoutError
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

import eaglefeed.core.stage as stage
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.metrics import WorkerMetrics
from tests.fakes.kafka import FakeKafka


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


def test_the_idle_clock_expires_only_after_seconds_caught_up():
    clock = stage.IdleClock(seconds=5, clock=lambda: 0.0, probe_every=1)
    assert clock.observe(100.0, busy=False)  # the first probe is due at once
    clock.probed(0, 100.0)
    assert not clock.observe(100.5, busy=False)  # probes at most once per probe_every
    assert clock.observe(101.0, busy=False)
    assert not clock.expired(104.9)
    assert clock.expired(105.0)


def test_work_a_lag_or_an_unknown_lag_starts_the_count_again():
    clock = stage.IdleClock(seconds=5, probe_every=1)
    clock.probed(0, 100.0)
    assert not clock.observe(103.0, busy=True)  # records came in: not caught up
    assert not clock.expired(106.0)
    clock.probed(0, 104.0)
    clock.probed(3, 105.0)  # behind
    assert not clock.expired(110.0)
    clock.probed(0, 106.0)
    clock.probed(None, 107.0)  # no assignment (e.g. waiting for the group join): not caught up
    assert not clock.expired(120.0) and clock.lag is None
    clock.probed(0, 121.0)
    assert clock.expired(126.0) and clock.lag == 0


def test_an_upstream_with_work_and_a_member_holds_the_exit_back():
    clock = stage.IdleClock(seconds=5, probe_every=1)
    working = stage.Upstream(group="g", topic="p", lag=497, members=1)
    clock.probed(0, 100.0, upstream=working)
    assert not clock.expired(110.0)  # caught up itself, but generate still works
    clock.probed(0, 110.0, upstream=stage.Upstream(group="g", topic="p", lag=None))  # unknown: waits too
    assert not clock.expired(120.0)
    clock.probed(0, 120.0, upstream=stage.Upstream(group="g", topic="p", lag=0))
    assert clock.expired(125.0) and not clock.upstream.stalled


def test_an_upstream_with_work_and_no_member_lets_the_stage_exit_saying_so():
    clock = stage.IdleClock(seconds=5, probe_every=1)
    clock.probed(0, 100.0, upstream=stage.Upstream(group="g", topic="p", lag=497, members=0))
    assert clock.expired(105.0) and clock.upstream.stalled and clock.upstream.lag == 497


def test_upstream_lag_asks_for_members_only_while_there_is_work():
    kafka = FakeKafka()
    kafka.create_topic("p", 2)
    backlog = kafka.backlog()
    assert stage.upstream_lag(backlog, group="g", topic="p") == stage.Upstream(group="g", topic="p", lag=0)
    kafka.producer().send("p", value=b"x", partition=1)
    assert stage.upstream_lag(backlog, group="g", topic="p") == stage.Upstream(
        group="g", topic="p", lag=1, members=0)
    backlog.unanswered = True
    assert stage.upstream_lag(backlog, group="g", topic="p").lag is None


def test_without_seconds_the_clock_never_probes_or_expires():
    never = stage.IdleClock(seconds=None)
    assert not never.observe(0.0, busy=False)
    never.probed(0, 0.0)
    assert not never.expired(1e9)


def test_consumer_lag_is_the_distance_from_each_position_to_its_end():
    fake = FakeKafka()
    fake.create_topic("t", 2)
    for p, count in ((0, 3), (1, 2)):
        for _ in range(count):
            fake.append("t", b"v", partition=p)
    consumer = fake.consumer("g", max_poll_records=1)
    consumer.subscribe(["t"])
    assert stage.consumer_lag(consumer) is None  # not joined: no assignment
    consumer.poll()  # joins, reads one record
    assert stage.consumer_lag(consumer) == 4
    while consumer.poll():
        pass
    assert stage.consumer_lag(consumer) == 0


def test_consumer_lag_under_read_committed_ends_at_the_last_stable_offset():
    fake = FakeKafka()
    fake.create_topic("t", 1)
    fake.append("t", b"v")
    producer = fake.producer(transactional_id="x")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"open")
    consumer = fake.consumer("g")
    consumer.subscribe(["t"])
    consumer.poll()
    assert stage.consumer_lag(consumer) == 0  # the open transaction is not readable yet
    producer.commit_transaction()
    assert stage.consumer_lag(consumer) == 2  # its record and its marker
    consumer.poll()
    assert stage.consumer_lag(consumer) == 0  # the position moved past the marker


def test_consumer_lag_is_unknown_when_the_broker_does_not_answer():
    class Failing:
        def assignment(self):
            return {TopicPartition("t", 0)}

        def end_offsets(self, partitions, timeout_ms=None):
            raise KafkaTimeoutError("no answer")

    assert stage.consumer_lag(Failing()) is None


def test_group_lag_counts_what_other_members_hold_from_the_groups_committed_offset():
    # A sink caught up on 2 of 3 partitions while a SIGKILLed member's session still held the
    # third exited "caught up" with 101 of 500 rows unwritten (test_sink_idle_exit).
    fake = FakeKafka()
    fake.create_topic("t", 3)
    for p in range(3):
        for _ in range(3):
            fake.append("t", b"v", partition=p)
    consumer = fake.consumer("g")
    consumer.subscribe(["t"])
    backlog = fake.backlog()
    fake.rebalance(revoke=[("t", 2)], group="g")  # another member holds partition 2
    while consumer.poll():
        pass
    assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert stage.consumer_lag(consumer) == 0
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) == 3
    fake.set_committed("g", "t", 2, 2)
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) == 1
    fake.set_committed("g", "t", 2, 3)
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) == 0


def test_group_lag_asks_about_the_group_only_once_the_member_is_caught_up():
    fake = FakeKafka()
    fake.create_topic("t", 1)
    fake.append("t", b"v")
    fake.append("t", b"v")
    consumer = fake.consumer("g", max_poll_records=1)
    consumer.subscribe(["t"])
    backlog = fake.backlog()
    consumer.poll()
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) == 1
    assert backlog.reads == 0  # its own lag decided it: no admin round trip
    consumer.poll()
    backlog.unanswered = True
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) is None
    backlog.unanswered = False
    assert stage.group_lag(consumer, backlog, group="g", topics=["t"]) == 0
