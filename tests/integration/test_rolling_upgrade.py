"""A rolling upgrade on the real broker: v1 and v2 stages side by side, then v1 retired.

A worker that writes GenerationRecord v1 as the previous release did (a child process run
with ``--generation-schema-version 1``) and a producer of PromptRecord v1 write while a
current (v2) worker and sink run; the old worker then stops and more prompts follow. Every
prompt must end as exactly one row, and a row must not depend on which version wrote its record.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import SinkConfig, WorkerConfig
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset import shards
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.schemas import GENERATION, codec_for
from eaglefeed.schemas.codec import HEADER_LEN, MAGIC
from eaglefeed.schemas.columnar import decode_generations
from tests.cli import kafka_flags, start_cli
from tests.factories import make_prompt
from tests.integration.worker_support import (
    publish,
    read_topic,
    wait_for_members,
)
from tests.running import WorkerThread, wait_until

pytestmark = pytest.mark.kafka

V1 = codec_for("generation", 1)
PROMPT_V1 = codec_for("prompt", 1)


def test_v1_and_v2_stages_side_by_side_write_each_prompt_once(kafka_config, standin_factory, tmp_path):
    url = standin_factory("--latency-model", "none")
    out = tmp_path / "dataset"
    first = [make_prompt(i, samples=2) for i in range(60)]
    later = [make_prompt(i, samples=2) for i in range(60, 100)]
    publish(kafka_config, [PROMPT_V1.encode(p) for p in first[:6]])  # creates the topics (6 partitions)

    stop_sink = StopSignal()
    sink_result: dict[str, object] = {}
    sink = threading.Thread(target=lambda: sink_result.update(s=run_sink(SinkConfig(
        kafka=kafka_config, output=out, flush_seconds=0.5), stop=stop_sink)))
    sink.start()
    new_worker = WorkerThread(WorkerConfig(kafka=kafka_config, sglang_urls=(url,), concurrency=8,
                                           exit_when_idle=15))
    old_worker = start_cli("--log-level", "info", "generate", "--generation-schema-version", "1",
                           "--sglang-url", url, *kafka_flags(kafka_config), "--concurrency", "8",
                           log=tmp_path / "old-worker.log")
    try:
        wait_for_members(kafka_config, 2)
        publish(kafka_config, [PROMPT_V1.encode(p) for p in first[6:]])
        wait_until(lambda: _versions(kafka_config) == {"v1", "v2"}, timeout=60,
                   what="records of both versions")
        old_worker.send_signal(signal.SIGTERM)  # the old release is retired mid-stream
        assert old_worker.wait(timeout=60) == 0
        publish(kafka_config, [PROMPT_V1.encode(p) for p in later])
        new_worker.join(timeout=120)
        expected = 2 * (len(first) + len(later))
        wait_until(lambda: _rows(out) >= expected or not sink.is_alive(), timeout=90, what=f"{expected} rows")
    finally:
        if old_worker.poll() is None:
            old_worker.kill()
        stop_sink.set()
        sink.join(timeout=60)
    assert not sink.is_alive()

    rows = pq.read_table(out / "segments").to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == expected  # every sample of every prompt, exactly once
    assert {i.rsplit(":", 1)[0] for i in ids} == {p["prompt_id"] for p in first + later}
    # Each row is exactly its record, whichever version wrote it (the record last written wins
    # nothing: duplicates of one id carry the same ids, checked here too).
    records = {}
    for rec in read_topic(kafka_config, kafka_config.generations_topic):
        decoded = GENERATION.decode(rec.value)
        seen = records.setdefault(decoded["id"], decoded)
        assert (seen["prompt_ids"], seen["output_ids"]) == (decoded["prompt_ids"], decoded["output_ids"])
    for row in rows:
        rec = records[row["id"]]
        assert row["input_ids"] == rec["prompt_ids"] + rec["output_ids"]
        assert row["loss_mask"] == [0] * len(rec["prompt_ids"]) + [1] * len(rec["output_ids"])
    engines = {r["engine"] for r in rows}
    assert engines == {None, "sglang"}  # v1 records have no engine; v2 workers stamp theirs
    # The same record through either version's encoding gives the same row, but for the columns
    # of fields v1 does not have (null in its rows).
    newer = ["engine", "capped_at", "weight_version", "seeded"]
    for version in (V1, GENERATION):
        table = _table([version.encode(r) for r in records.values()])
        if version is V1:
            assert all(v is None for name in newer for v in table.column(name).to_pylist())
            v1_rows = table.drop_columns(newer).to_pylist()
        else:
            assert table.drop_columns(newer).to_pylist() == v1_rows


def _table(values: list[bytes]):
    decoded = decode_generations(values)
    assert decoded.errors == []
    return shards.batch_to_table(decoded.batch)


def _versions(kafka) -> set[str]:
    names = {MAGIC + V1.fingerprint: "v1", MAGIC + GENERATION.fingerprint: "v2"}
    return {names.get(r.value[:HEADER_LEN], "?") for r in read_topic(kafka, kafka.generations_topic)}


def _rows(out: Path) -> int:
    try:
        return sum(s["rows"] for s in live_segments(read_manifest(out)).values())
    except FileNotFoundError:
        return 0
