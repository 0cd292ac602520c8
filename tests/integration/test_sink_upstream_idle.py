"""``sink --exit-when-idle`` means the pipeline is finished for the sink: it does not exit "lag at
exit 0" while prompts wait upstream (issue 36, trip 4). A generate member holding them: it waits;
nobody to generate them: it exits non-zero in one line naming the count and the group."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from eaglefeed.core.kafka import ensure_topics, make_consumer, make_producer
from tests.cli import kafka_flags, run_cli, start_cli
from tests.factories import prompt

pytestmark = pytest.mark.kafka

PROMPTS = 12


def publish_prompts(kafka) -> None:
    ensure_topics(kafka, {kafka.prompts_topic: 2, kafka.generations_topic: 2, kafka.dead_letter_topic: 1})
    producer = make_producer(kafka)
    try:
        for i in range(PROMPTS):
            producer.send(kafka.prompts_topic, key=b"p%d" % i, value=prompt(f"p{i}"))
        producer.flush()
    finally:
        producer.close()


def sink_args(kafka, out: Path) -> list[str]:
    return ["sink", "--output", str(out), *kafka_flags(kafka), "--flush-seconds", "0.3",
            "--exit-when-idle", "2"]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}


def test_a_sink_with_prompts_nobody_generates_exits_non_zero_naming_them(kafka_config, tmp_path):
    kafka = kafka_config
    publish_prompts(kafka)  # no worker runs: every prompt is still to generate
    done = run_cli(*sink_args(kafka, tmp_path / "dataset"), timeout=120, env=clean_env())
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    assert "lag at exit 0" not in text, text
    group = kafka.default_group("generate")
    line = f"exited idle with {PROMPTS} prompts not yet generated upstream (group {group}, no member)"
    assert line in done.stdout, text


def test_a_sink_waits_while_a_generate_member_still_holds_prompts(kafka_config, tmp_path):
    kafka = kafka_config
    publish_prompts(kafka)
    # a stalled worker (its server down): a member of the group that commits nothing
    worker = make_consumer(kafka, kafka.default_group("generate"))
    worker.subscribe([kafka.prompts_topic])
    deadline = time.monotonic() + 60
    while not worker.assignment():
        assert time.monotonic() < deadline, "the stand-in member never joined"
        worker.poll(timeout_ms=200, max_records=1)
    log = tmp_path / "sink.log"
    sink = start_cli(*sink_args(kafka, tmp_path / "dataset"), log=log, env=clean_env())
    try:
        time.sleep(10)  # five times its --exit-when-idle
        assert sink.poll() is None, "the sink exited while upstream still had work:\n" + log.read_text()
        worker.close()  # the worker leaves with its prompts undone
        code = sink.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the sink never exited once upstream had no member:\n" + log.read_text())
    finally:
        sink.kill()
    text = log.read_text()
    assert code != 0, text
    assert f"exited idle with {PROMPTS} prompts not yet generated upstream" in text, text
