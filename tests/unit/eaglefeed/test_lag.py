"""ProbeSession: one admin client reused while it works, replaced after a failure."""

from eaglefeed import lag
from eaglefeed.config import KafkaConfig


class FakeProbe:
    opened: list["FakeProbe"] = []

    def __init__(self, *, kafka):
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
