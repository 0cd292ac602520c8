"""WorkerStatus records (``<prefix>.workers``): what a worker encodes is what ``status`` decodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.core.errors import SchemaError
from eaglefeed.schemas import WORKER_STATUS, codec_for
from eaglefeed.schemas.worker_status import (
    WORKERS_TOPIC_CONFIG,
    server_status,
    worker_status,
    worker_tombstone,
    workers_topic,
)

COUNT = st.integers(min_value=0, max_value=2**40)
LOAD = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False))
SERVER = st.builds(server_status, url=st.text(max_size=40), healthy=st.booleans(),
                   limit=st.one_of(st.none(), st.integers(1, 2**31 - 1)), running=LOAD, waiting=LOAD,
                   in_flight=st.integers(0, 2**31 - 1), rows_done=COUNT)


@given(worker_id=st.text(min_size=1, max_size=40), group=st.text(max_size=40), at=COUNT,
       interval=st.floats(min_value=0.1, max_value=600),
       concurrency=st.one_of(st.none(), st.integers(1, 4096)), prompts=COUNT,
       servers=st.lists(SERVER, max_size=5), in_flight=st.one_of(st.none(), COUNT))
@settings(max_examples=200)
def test_round_trip(worker_id, group, at, interval, concurrency, prompts, servers, in_flight):
    key, value = worker_status(worker_id=worker_id, group_id=group, updated_at=at, interval_seconds=interval,
                               concurrency=concurrency, prompts_done=prompts, servers=servers,
                               prompts_in_flight=in_flight)
    assert key == worker_id.encode()
    assert WORKER_STATUS.decode(value) == {
        "worker_id": worker_id, "group_id": group, "updated_at": at, "interval_seconds": interval,
        "concurrency": concurrency, "prompts_done": prompts,
        "rows_done": sum(s["rows_done"] for s in servers), "servers": servers, "prompts_in_flight": in_flight}


def test_a_v1_record_reads_with_no_prompts_in_flight():
    v1 = codec_for("worker_status", 1)
    value = v1.encode({"worker_id": "w", "group_id": "g", "updated_at": 1, "interval_seconds": 5.0,
                       "concurrency": None, "prompts_done": 3, "rows_done": 0, "servers": []})
    assert WORKER_STATUS.decode(value)["prompts_in_flight"] is None  # unknown, not 0


def test_a_tombstone_is_the_key_without_a_value():
    assert worker_tombstone("host-7") == (b"host-7", None)


def test_a_wrong_field_is_a_schema_error():
    server = {**server_status(url="u", healthy=True, limit=None, running=None, waiting=None, in_flight=0,
                              rows_done=0), "limit": "many"}
    with pytest.raises(SchemaError):
        worker_status(worker_id="w", group_id="g", updated_at=1, interval_seconds=5.0, concurrency=None,
                      prompts_done=0, servers=[server])


def test_the_topic_follows_the_prefix_and_is_compacted():
    assert workers_topic("blue") == "blue.workers"
    assert WORKERS_TOPIC_CONFIG["cleanup.policy"] == "compact"
    assert int(WORKERS_TOPIC_CONFIG["delete.retention.ms"]) <= 5 * 60 * 1000  # tombstones go soon
