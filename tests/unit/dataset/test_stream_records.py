"""Consumption records in an object store: a record read half-written never stops a reader."""

from __future__ import annotations

import logging

import numpy as np

from eaglefeed.dataset.store import ObjectStore, parse
from eaglefeed.dataset.streaming.position import DigestSet, StreamPosition, digest
from eaglefeed.dataset.streaming.record import (
    GroupRecords,
    Record,
    record_bytes,
    record_rel,
    write_store_record,
)
from tests.fakes.s3 import FakeS3


def _record(*names: str) -> Record:
    states = DigestSet()
    for name in names:
        states.add(digest(name))
    return Record(position=StreamPosition(group="draft", rank=0, world_size=1), states=states)


def test_a_record_read_while_replaced_keeps_counting_what_it_held_and_is_read_again(caplog):
    s3 = FakeS3()
    store = ObjectStore(parse("s3://bkt/ds"), client=s3)
    write_store_record(store, _record("a.safetensors"))
    records = GroupRecords(None, store=store)
    before = records.states()["draft"]
    assert before.size == 1
    newer = record_bytes(_record("a.safetensors", "b.safetensors"))
    key = store.uri.key(record_rel(_record().position))
    s3.put("bkt", key, newer[: len(newer) // 2])  # what a reader sees of a put that is not atomic to it
    with caplog.at_level(logging.WARNING):
        assert np.array_equal(records.states()["draft"], before)  # no raise: the old record still counts
        s3.put("bkt", key, newer)  # the put completes
        assert records.states()["draft"].size == 2
    assert not caplog.records  # one torn read is not worth a line


def test_a_record_that_stays_unreadable_is_said_once_and_never_raised(caplog):
    s3 = FakeS3()
    store = ObjectStore(parse("s3://bkt/ds"), client=s3)
    s3.put("bkt", store.uri.key(record_rel(_record().position)), b"not an npz")
    records = GroupRecords(None, store=store)
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            assert records.states()["draft"].size == 0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "is not a consumption record" in said[0]
