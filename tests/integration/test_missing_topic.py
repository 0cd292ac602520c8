"""A mistyped ``--topic-prefix``: with ``--exit-when-idle S`` a stage that is still waiting for its input
topic after S seconds exits non-zero in one line naming the topic and the prefixes the broker holds;
without it the stage keeps waiting, and its waiting line names those prefixes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from tests.cli import run_cli, start_cli

pytestmark = pytest.mark.kafka


def flags(kafka, prefix: str) -> list[str]:
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", prefix]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}


STAGES = {
    "generate": lambda out: ["generate", "--sglang-url", "http://127.0.0.1:9"],
    "sink": lambda out: ["sink", "--output", str(out)],
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_with_exit_when_idle_stops_waiting_for_a_mistyped_prefix(stage, kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, pipeline_topics(kafka, 1))  # the pipeline the user meant
    typo = f"{kafka.topic_prefix}x"
    started = time.monotonic()
    result = run_cli(*STAGES[stage](tmp_path / "dataset"), *flags(kafka, typo), "--exit-when-idle", "3",
                     timeout=60, env=clean_env())
    took = time.monotonic() - started
    assert result.returncode != 0, result.stdout + result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    topic = f"{typo}.prompts" if stage == "generate" else f"{typo}.generations"
    assert f"no topic {topic} after 3 s" in lines[0], lines
    assert "prefixes on the broker" in lines[0] and f" {kafka.topic_prefix}," in lines[0] + ",", lines
    assert took < 60, took
    assert not (tmp_path / "dataset").exists()  # the typo's group owns no folder


def test_without_exit_when_idle_the_stage_keeps_waiting_and_names_the_prefixes(kafka_config, tmp_path):
    kafka = kafka_config
    ensure_topics(kafka, pipeline_topics(kafka, 1))
    log = tmp_path / "sink.log"
    proc = start_cli("sink", "--output", str(tmp_path / "dataset"), *flags(kafka, f"{kafka.topic_prefix}x"),
                     log=log, env=clean_env())
    try:
        deadline = time.monotonic() + 60
        while "waiting for topics" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        time.sleep(4)
        assert proc.poll() is None, log.read_text()[-3000:]  # still waiting: nothing said when to give up
        waiting = [line for line in log.read_text().splitlines() if "waiting for topics" in line]
        assert len(waiting) == 1, waiting
        assert "prefixes on the broker" in waiting[0], waiting
        assert f" {kafka.topic_prefix}," in waiting[0] + ",", waiting
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
