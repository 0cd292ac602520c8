"""SIGKILL the real sink process at every step of its commit sequence, restart it, and find every
record exactly once in the dataset, while compaction runs beside it and bad records are dead-lettered."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from eaglefeed.core.kafka import ensure_topics, make_producer
from eaglefeed.dataset import manifest
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import DEAD_LETTER, GENERATION
from tests.cli import kafka_flags, start_cli
from tests.factories import generation_record

pytestmark = pytest.mark.kafka

PARTITIONS = 3


def record(i: int, rng: random.Random) -> dict:
    prompt = [rng.randrange(9, 4096) for _ in range(rng.randint(3, 40))]
    output = [rng.randrange(3, 4096) for _ in range(rng.randint(1, 60))] + [2]
    return generation_record(id=f"{i:032x}:0", prompt_id=f"{i:032x}", prompt_ids=prompt, output_ids=output,
                             finish_reason=rng.choice(["stop", "stop", "length"]), latency_seconds=0.5,
                             source="test", source_row=str(i), tokenizer=str(TOKENIZER_DIR))


class Upstream:
    """Publishes GenerationRecords the way generate workers do (keyed by id), duplicates and junk included."""

    def __init__(self, kafka, seed):
        self.kafka = kafka
        self.rng = random.Random(seed)
        self.producer = make_producer(kafka)
        self.sent: dict[str, dict] = {}
        self.bad: list[bytes] = []  # keys of records that must be dead-lettered

    def publish(self, first: int, count: int, redeliver: int) -> None:
        messages = []
        for i in range(first, first + count):
            rec = record(i, self.rng)
            self.sent[rec["id"]] = rec
            messages.append((rec["id"].encode(), GENERATION.encode(rec)))
        old = self.rng.sample(sorted(self.sent), redeliver)
        messages += [(i.encode(), GENERATION.encode(self.sent[i])) for i in old]  # at-least-once upstream
        for n in range(2):
            key = f"bad-{first}-{n}".encode()
            broken = record(10**9 + first + n, self.rng)
            broken["completion_tokens"] += 1  # counts disagree with the ids
            messages += [(key + b"g", b"\xc3\x01 not avro at all"), (key + b"i", GENERATION.encode(broken))]
            self.bad += [key + b"g", key + b"i"]
        self.rng.shuffle(messages)
        for key, value in messages:
            self.producer.send(self.kafka.generations_topic, key=key, value=value)
        self.producer.flush()


def start_sink(kafka, out: Path, log: Path, crash_at: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    if crash_at:
        env["EAGLEFEED_SINK_CRASH_AT"] = crash_at
    return start_cli("--log-level", "warning", "sink", "--output", str(out), *kafka_flags(kafka),
                     "--group-instance-id", "sink-0", "--flush-rows", "23", "--flush-seconds", "0.3",
                     "--exit-when-idle", "2", log=log, append=True, env=env)


def live_rows(out: Path) -> list[dict]:
    with snapshot(out) as files:
        return [row for batch in iter_batches(files, columns=["id", "input_ids", "loss_mask", "prompt_len"])
                for row in batch.to_pylist()]


def test_sigkill_at_every_commit_step_loses_and_doubles_nothing(kafka_config, tmp_path):
    seed = random.randrange(10**6)
    print(f"seed {seed}")
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    out, log = tmp_path / "dataset", tmp_path / "sink.log"
    upstream = Upstream(kafka, seed)
    killer = random.Random(seed)
    # (publish first?, crash step, kill after seconds, must die): every step of the commit sequence,
    # twice at random moments, then a clean run that drains what is left
    plan = [(True, "after_dead_letter:1", 0, True), (False, "after_rename:2", 0, True),
            (True, "after_manifest:3", 0, True), (False, None, 1.5, False), (True, "after_commit:1", 0, True),
            (False, "after_rename:1", 0, False), (False, None, 2.0, False), (False, None, 0, False)]
    stop_compaction = threading.Event()
    compactions: list[int] = []
    errors: list[BaseException] = []

    def compact_beside_the_sink():
        try:
            while not stop_compaction.wait(0.2):
                if (out / manifest.MANIFEST).exists():
                    compactions.append(compact(out, CompactOptions(target_bytes=60_000)).shards)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    compactor = threading.Thread(target=compact_beside_the_sink)
    compactor.start()
    try:
        for run, (publish, crash_at, kill_after, must_die) in enumerate(plan):
            if publish:  # new work (and re-deliveries of old work) keeps arriving
                upstream.publish(first=run * 1000, count=120, redeliver=25)
            proc = start_sink(kafka, out, log, crash_at)
            if kill_after:
                time.sleep(kill_after + killer.random())
                proc.send_signal(signal.SIGKILL)
            code = proc.wait(timeout=90)
            allowed = {-signal.SIGKILL} if must_die else {0, -signal.SIGKILL} if run < len(plan) - 1 else {0}
            assert code in allowed, f"run {run}: exit {code}\n" + log.read_text()[-3000:]
    finally:
        stop_compaction.set()
        compactor.join(timeout=60)
    assert not errors, errors
    compact(out, CompactOptions(target_bytes=60_000, include_partial=True))

    rows = live_rows(out)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a record was written twice"
    assert set(ids) == set(upstream.sent), "a record is missing"
    for row in rows:  # token-exact: prompt ids then output ids, mask 0 then 1
        sent = upstream.sent[row["id"]]
        assert row["input_ids"] == sent["prompt_ids"] + sent["output_ids"]
        assert row["loss_mask"] == [0] * row["prompt_len"] + [1] * len(sent["output_ids"])
    assert pq.read_table(out / "segments").num_rows == len(upstream.sent)  # the plain directory read agrees
    assert sum(compactions) > 0, "compaction never ran beside the sink"

    events = manifest.read_manifest(out)
    ends = {f"{kafka.generations_topic}:{p}": o for p, o in _end_offsets(kafka).items()}
    assert manifest.resume_offsets(events) == ends  # every offset accounted for
    assert _dead_lettered_keys(kafka, len(upstream.bad)) == set(upstream.bad)


def _end_offsets(kafka) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        tps = [TopicPartition(kafka.generations_topic, p) for p in range(PARTITIONS)]
        return {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def _dead_lettered_keys(kafka, expected: int, timeout: float = 30.0) -> set[bytes]:
    consumer = KafkaConsumer(kafka.dead_letter_topic, bootstrap_servers=kafka.bootstrap_servers,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    keys: set[bytes] = set()
    kinds: dict[bytes, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(keys) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for rec in records:
                    letter = DEAD_LETTER.decode(rec.value)
                    assert letter["stage"] == "sink" and letter["topic"] == kafka.generations_topic
                    keys.add(letter["key"])
                    kinds[letter["key"]] = letter["error_kind"]
    finally:
        consumer.close()
    # the garbage starts with the single-object marker, so it names a writer schema we do not know
    assert all(kind == ("unknown_schema" if key.endswith(b"g") else "invalid_generation")
               for key, kind in kinds.items())
    return keys
