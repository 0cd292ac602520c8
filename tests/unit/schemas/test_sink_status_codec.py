"""SinkStatus records (``<prefix>.sinks``): what a sink encodes is what ``status`` decodes."""

from __future__ import annotations

from eaglefeed.schemas import SINK_STATUS
from eaglefeed.schemas.sink_status import SINKS_TOPIC_CONFIG, sink_status, sink_tombstone, sinks_topic


def test_round_trip_and_tombstone():
    key, value = sink_status(sink_id="host-3", group_id="t-sink", updated_at=7, interval_seconds=5.0,
                             buffered=120, flush_seconds=30.0, rows_written=40)
    assert key == b"host-3"
    assert SINK_STATUS.decode(value) == {"sink_id": "host-3", "group_id": "t-sink", "updated_at": 7,
                                         "interval_seconds": 5.0, "buffered": 120, "flush_seconds": 30.0,
                                         "rows_written": 40}
    assert sink_tombstone("host-3") == (b"host-3", None)


def test_the_topic_follows_the_prefix_and_is_compacted():
    assert sinks_topic("blue") == "blue.sinks"
    assert SINKS_TOPIC_CONFIG["cleanup.policy"] == "compact"
