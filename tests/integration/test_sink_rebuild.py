"""The dataset folder is the truth: a sink whose ``--output`` was deleted rebuilds it from the topic with
its usual group (same rows, same ids), and says so when retention took the topic's first records."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from kafka.structs import TopicPartition

from eaglefeed.core.kafka import ensure_topics, make_admin, make_producer
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.schemas import GENERATION
from tests.cli import kafka_flags, run_cli, start_cli
from tests.integration.test_sink_exactly_once import record

pytestmark = pytest.mark.kafka

PARTITIONS = 2
COUNT = 120


def publish(kafka, count: int) -> None:
    rng = random.Random(7)
    producer = make_producer(kafka)
    try:
        for i in range(count):
            rec = record(i, rng)
            producer.send(kafka.generations_topic, key=rec["id"].encode(), value=GENERATION.encode(rec))
        producer.flush()
    finally:
        producer.close()


def sink(kafka, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    return run_cli("--log-level", "info", "sink", "--output", str(out), *kafka_flags(kafka),
                   "--group-id", f"{kafka.topic_prefix}-sink", "--flush-seconds", "0.3",
                   "--exit-when-idle", "2", "--progress-seconds", "0", timeout=180, env=env)


def rows(out: Path) -> list[tuple[str, list[int]]]:
    with snapshot(out) as files:
        batches = iter_batches(files, columns=["id", "input_ids"])
        return sorted((row["id"], row["input_ids"]) for batch in batches for row in batch.to_pylist())


def test_a_deleted_output_is_rebuilt_whole_by_the_same_sink_command(kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    publish(kafka, COUNT)
    out = tmp_path / "dataset"
    first = sink(kafka, out)
    assert first.returncode == 0 and f"wrote {COUNT} rows" in first.stdout, first.stderr[-3000:]
    before = rows(out)

    again = sink(kafka, out)  # the folder intact: it resumes from its manifest and writes nothing
    assert again.returncode == 0 and "wrote 0 rows" in again.stdout, again.stdout + again.stderr[-3000:]

    shutil.rmtree(out)  # the group's offsets stand at the topic's end; the folder says nothing is written
    rebuilt = sink(kafka, out)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert f"wrote {COUNT} rows" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr[-3000:]
    assert "reading them from the beginning" in rebuilt.stderr
    assert "rebuilt only in part" not in rebuilt.stderr
    assert rows(out) == before  # same rows, same ids


def test_a_rebuild_after_retention_deleted_records_names_what_is_missing(kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: 1, kafka.dead_letter_topic: 1})
    publish(kafka, 50)
    out = tmp_path / "dataset"
    assert sink(kafka, out).returncode == 0
    admin = make_admin(kafka)
    try:
        admin.delete_records({TopicPartition(kafka.generations_topic, 0): 20})  # what retention does
    finally:
        admin.close()

    shutil.rmtree(out)
    rebuilt = sink(kafka, out)
    assert rebuilt.returncode == 0 and "wrote 30 rows" in rebuilt.stdout, rebuilt.stderr[-3000:]
    warnings = [line for line in rebuilt.stderr.splitlines() if "rebuilt only in part" in line]
    assert len(warnings) == 1, rebuilt.stderr[-3000:]
    assert f"{kafka.generations_topic}-0 at 20" in warnings[0], warnings


def test_a_dataset_deleted_under_a_running_sink_stops_it_and_a_restart_rebuilds_it(kafka_config, tmp_path):
    # Before the fix the sink read the new manifest as the dataset and went on: the rows it had
    # written before the deletion were gone for good, with exit 0.
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    publish(kafka, 40)
    out = tmp_path / "dataset"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    log = tmp_path / "sink.log"
    proc = start_cli("--log-level", "info", "sink", "--output", str(out), *kafka_flags(kafka),
                     "--group-id", f"{kafka.topic_prefix}-sink", "--flush-seconds", "0.3",
                     "--progress-seconds", "0", log=log, env=env)
    try:
        deadline = time.monotonic() + 90
        while not (out / "manifest.jsonl").exists() or len(rows(out)) < 40:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        shutil.rmtree(out)
        rng = random.Random(8)
        producer = make_producer(kafka)
        try:
            for i in range(40, COUNT):
                rec = record(i, rng)
                producer.send(kafka.generations_topic, key=rec["id"].encode(), value=GENERATION.encode(rec))
            producer.flush()
        finally:
            producer.close()
        assert proc.wait(timeout=90) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "started over while this process wrote to it" in log.read_text(), log.read_text()[-3000:]

    rebuilt = sink(kafka, out)  # the same command: every row, the first 40 included
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert len(rows(out)) == COUNT and len({row_id for row_id, _ in rows(out)}) == COUNT
