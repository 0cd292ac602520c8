"""``eaglefeed dead-letters`` on the real broker and the stand-in: list, count, re-drive after a fix."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from eaglefeed.cli.main import main
from eaglefeed.consumers.generate import run_worker
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import SinkConfig, WorkerConfig
from tests.factories import make_prompt
from tests.integration.worker_support import dead_letters, generations, publish_prompts

pytestmark = pytest.mark.kafka


def cli(kafka, capsys, *flags):
    assert main(["dead-letters", "--bootstrap-servers", kafka.bootstrap_servers,
                 "--topic-prefix", kafka.topic_prefix, *flags]) == 0
    return capsys.readouterr().out.splitlines()


def generate(kafka, url):
    return run_worker(WorkerConfig(kafka=kafka, sglang_urls=(url,), concurrency=8, exit_when_idle=5,
                                   max_attempts=2, retry_backoff=0.01, commit_interval=0.2))


def test_dead_letters_are_listed_counted_and_redriven_once_fixed(kafka_config, standin_factory, tmp_path,
                                                                 capsys):
    too_long = [make_prompt(i, samples=2, length=100, max_new_tokens=8) for i in range(4)]
    fits = [make_prompt(10 + i, length=20, max_new_tokens=8) for i in range(3)]
    publish_prompts(kafka_config, too_long + fits, partitions=2)
    small = standin_factory("--latency-model", "none", "--context-length", "64", "--output-len-mean", "4")
    assert generate(kafka_config, small) == 7  # a context too small for 4 prompts: 8 dead letters, not sent
    assert len(dead_letters(kafka_config)) == 8

    listed = cli(kafka_config, capsys)
    assert listed[-1] == f"8 dead letters in {kafka_config.dead_letter_topic} (8 open, 0 re-driven)"
    ids = {p["prompt_id"] for p in too_long}
    for line in listed[:-1]:
        assert " generate context_exceeded record " in line and "context length" in line
        assert any(pid in line for pid in ids)
    rows = [json.loads(line) for line in cli(kafka_config, capsys, "--json")]
    assert {r["prompt_id"] for r in rows} == ids and {r["reason"] for r in rows} == {"context_exceeded"}
    assert {r["record_id"] for r in rows} == {f"{pid}:{i}" for pid in ids for i in range(2)}
    summary = cli(kafka_config, capsys, "--summary")[1].split()
    assert summary == ["8", "8", "0", "generate", "context_exceeded"]
    one = sorted(ids)[0]
    assert len(cli(kafka_config, capsys, "--id", one)) == 3  # its two samples and the total

    fixed = standin_factory("--latency-model", "none", "--output-len-mean", "4")
    out = cli(kafka_config, capsys, "--redrive", "--kind", "context_exceeded")
    assert out[-1] == "re-drove 4 records from 8 dead letters (0 not re-drivable)"
    # the second run finds the first one's markers: it republishes nothing, so costs no generation
    # even when no worker remembers the first copies (here none ran in between)
    out = cli(kafka_config, capsys, "--redrive", "--kind", "context_exceeded")
    assert out[-1] == ("re-drove 0 records from 8 dead letters (0 not re-drivable, 8 re-driven before "
                       "(--again re-drives them))")
    summary = cli(kafka_config, capsys, "--summary")[1].split()
    assert summary == ["8", "0", "8", "generate", "context_exceeded"]
    assert all(line.endswith("]") and "[re-driven " in line for line in cli(kafka_config, capsys)[:-1])
    generate(kafka_config, fixed)
    assert len(dead_letters(kafka_config)) == 8  # nothing new failed
    assert len(generations(kafka_config)) == 3 + 8  # each re-driven prompt generated once

    out = tmp_path / "dataset"
    run_sink(SinkConfig(kafka=kafka_config, output=out, flush_seconds=0.5, exit_when_idle=3))
    table = pq.read_table(out / "segments", columns=["id"])
    got = table.column("id").to_pylist()
    assert sorted(got) == sorted({f"{p['prompt_id']}:{i}" for p in too_long for i in range(2)}
                                 | {f"{p['prompt_id']}:0" for p in fits})
