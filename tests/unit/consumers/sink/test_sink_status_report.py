"""The sink's status record: what it holds, at once, on a change (once a second at most), each interval."""

from __future__ import annotations

from eaglefeed.consumers.sink.status_report import SinkStatusReport
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.schemas import SINK_STATUS


class Sender:
    def __init__(self) -> None:
        self.offered: list[tuple[bytes, bytes | None]] = []
        self.closed_with: object = "open"

    def offer(self, item):
        self.offered.append(item)

    def close(self, last):
        self.closed_with = last


def test_a_record_at_once_then_on_a_change_or_each_interval(tmp_path):
    held = [0]
    sender = Sender()
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="t"), output=tmp_path, group_instance_id="sink-a",
                     flush_seconds=30.0)
    report = SinkStatusReport(cfg=cfg, sender=sender, buffered=lambda: held[0],  # type: ignore[arg-type]
                              rows_written=lambda: 7, interval=5.0)
    report.tick(100.0)
    held[0] = 40
    report.tick(100.5)  # changed, but within a second of the last record
    report.tick(101.0)
    report.tick(102.0)  # unchanged: nothing until the interval
    report.tick(106.0)
    counts = [SINK_STATUS.decode(value)["buffered"] for _, value in sender.offered]  # type: ignore[arg-type]
    assert counts == [0, 40, 40]
    last = SINK_STATUS.decode(sender.offered[-1][1])  # type: ignore[arg-type]
    assert sender.offered[-1][0] == b"sink-a" and last["flush_seconds"] == 30.0 and last["rows_written"] == 7
    assert last["group_id"] == "t-sink"
    report.close(clean=True)
    assert sender.closed_with == (b"sink-a", None)  # a tombstone: status stops counting it
