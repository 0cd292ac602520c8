"""LagProbe and ProbeSession: one admin client reused while it works, replaced after a failure."""

import pytest
from kafka.errors import KafkaConnectionError
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.core import lag
from eaglefeed.core.config import KafkaConfig


class FakeProbe:
    opened: list["FakeProbe"] = []

    def __init__(self, *, kafka, retry_seconds=None):
        self.kafka, self.closed = kafka, False
        FakeProbe.opened.append(self)

    def close(self):
        self.closed = True


def test_a_failed_reading_closes_the_probe_and_the_next_one_reconnects(monkeypatch):
    monkeypatch.setattr(lag, "LagProbe", FakeProbe)
    FakeProbe.opened = []
    session = lag.ProbeSession(kafka=KafkaConfig())
    assert session.read(lambda probe: 1) == 1
    assert session.read(lambda probe: 2) == 2
    assert len(FakeProbe.opened) == 1  # reused while it works

    def broken(probe):
        raise OSError("broker down")

    assert session.read(broken) is None
    assert FakeProbe.opened[0].closed
    assert session.read(lambda probe: probe) is FakeProbe.opened[1]
    session.close()
    assert FakeProbe.opened[1].closed and len(FakeProbe.opened) == 2
    session.close()  # nothing open: nothing to do


class StaleAdmin:
    """kafka-python 3.0.12's admin client after a group's coordinator stopped: it keeps asking that node."""

    made: list = []

    def __init__(self, stale):
        self.stale, self.closed = stale, False
        StaleAdmin.made.append(self)

    def list_group_offsets(self, groups):
        if self.stale:
            raise KafkaConnectionError("111 ECONNREFUSED")
        return {"g": {TopicPartition("t", 0): OffsetAndMetadata(7, "", -1)}}

    def describe_topics(self, topics):
        return [{"error_code": 0, "partitions": [{"partition_index": 0}]}]

    def list_partition_offsets(self, specs, isolation_level=None):
        return {tp: type("Result", (), {"offset": 9})() for tp in specs}

    def close(self):
        self.closed = True


def test_a_probe_asks_a_new_admin_client_when_the_old_one_keeps_failing(monkeypatch):
    StaleAdmin.made = []
    monkeypatch.setattr(lag, "make_admin", lambda kafka, **kw: StaleAdmin(stale=not StaleAdmin.made))
    monkeypatch.setattr(lag.time, "sleep", lambda s: None)
    probe = lag.LagProbe(kafka=KafkaConfig())
    (part,) = probe.measure("g", "t")
    assert (part.committed, part.end, part.lag) == (7, 9, 2)
    assert len(StaleAdmin.made) == 2 and StaleAdmin.made[0].closed
    probe.close()


def test_a_probe_gives_up_on_retriable_errors_after_its_retry_time(monkeypatch):
    StaleAdmin.made = []
    monkeypatch.setattr(lag, "make_admin", lambda kafka, **kw: StaleAdmin(stale=True))
    probe = lag.LagProbe(kafka=KafkaConfig(), retry_seconds=0.3)
    with pytest.raises(KafkaConnectionError):
        probe.measure("g", "t")
    assert len(StaleAdmin.made) >= 2
