"""``--exit-when-idle`` means caught up: a batch sink started after SIGKILLed sinks exits only once it
has written every generation in the topic (the dead members' sessions hold the group join for 20 s)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.schemas import GENERATION
from tests.cli import kafka_flags, start_cli
from tests.integration.test_sink_exactly_once import record

pytestmark = pytest.mark.kafka

PARTITIONS = 3


def start_sink(kafka, out: Path, log: Path, *flags: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    return start_cli("--log-level", "info", "sink", "--output", str(out), *kafka_flags(kafka),
                     "--flush-seconds", "0.3", *flags, log=log, append=True, env=env)


def publish(kafka, ids: range, pause: float = 0.0) -> None:
    rng = random.Random(ids.start)
    producer = make_producer(kafka)
    try:
        for i in ids:
            rec = record(i, rng)
            producer.send(kafka.generations_topic, key=rec["id"].encode(), value=GENERATION.encode(rec))
            if pause:
                time.sleep(pause)
        producer.flush()
    finally:
        producer.close()


def written_ids(out: Path) -> list[str]:
    if not (out / "manifest.jsonl").exists():
        return []
    with snapshot(out) as files:
        return [row["id"] for batch in iter_batches(files, columns=["id"]) for row in batch.to_pylist()]


def test_a_batch_sink_after_killed_members_exits_only_once_everything_is_written(kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    out, log = tmp_path / "dataset", tmp_path / "sink.log"
    publish(kafka, range(200))
    members = [start_sink(kafka, out, log) for _ in range(2)]
    deadline = time.monotonic() + 90
    while len(written_ids(out)) < 200:
        assert time.monotonic() < deadline, "the first sinks never wrote\n" + log.read_text()[-3000:]
        time.sleep(0.5)
    for proc in members:  # their sessions stay in the group for 20 s
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    # A worker is still filling the topic while the batch sink starts.
    filler = threading.Thread(target=publish, args=(kafka, range(200, 500), 0.01))
    filler.start()
    started = time.monotonic()
    batch = start_sink(kafka, out, log, "--exit-when-idle", "2")
    try:
        code = batch.wait(timeout=120)
    finally:
        batch.kill()
        filler.join(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    ids = written_ids(out)
    assert len(ids) == len(set(ids)) == 500, f"{len(set(ids))} of 500 written\n" + text[-3000:]
    assert "wrote 300 rows" in text and "lag at exit 0" in text, text[-2000:]
    assert time.monotonic() - started > 10  # it waited out the dead members' sessions
