"""Three worker processes share six partitions; one is SIGKILLed, one is SIGTERMed, the third finishes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from tests.factories import make_prompt
from tests.integration.worker_support import (
    count_generations,
    duplicates,
    generations,
    publish_prompts,
    spawn_worker,
    wait_for_members,
)
from tests.running import wait_until

pytestmark = pytest.mark.kafka
CONCURRENCY = 8


def test_sigkill_loses_nothing_and_redoes_only_in_flight_work(kafka_config, standin_factory, tmp_path: Path):
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "8", "--output-len-mean", "20",
                          "--output-len-sigma", "0.3", "--max-running-requests", "64")
    prompts = [make_prompt(i) for i in range(240)]
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 6))
    flags = ["--concurrency", str(CONCURRENCY), "--commit-interval", "0.1", "--session-timeout", "6",
             "--drain-seconds", "20"]
    workers = {name: spawn_worker(kafka_config, url, tmp_path / f"{name}.log", "--worker-id", name, *flags)
               for name in ("a", "b", "c")}
    wait_for_members(kafka_config, 3)
    publish_prompts(kafka_config, prompts, partitions=6)
    expected = {f"{p['prompt_id']}:0" for p in prompts}

    def seen() -> list[dict]:
        return [g for _r, g in generations(kafka_config)]

    wait_until(lambda: {g["worker_id"] for g in seen()} == {"a", "b", "c"}, timeout=60,
               what="all three to publish")
    workers["a"].send_signal(signal.SIGKILL)
    at_kill = count_generations(kafka_config)
    wait_until(lambda: count_generations(kafka_config) >= at_kill + 30, timeout=60,
               what="progress after the kill")
    workers["b"].send_signal(signal.SIGTERM)  # drain, commit, leave the group, exit 0
    assert workers["b"].wait(timeout=30) == 0, (tmp_path / "b.log").read_text()[-3000:]
    # c takes over b's partitions at once and a's after the session timeout
    wait_until(lambda: {g["id"] for g in seen()} >= expected, timeout=60, what="every prompt to be generated")
    workers["c"].send_signal(signal.SIGTERM)
    assert workers["c"].wait(timeout=30) == 0, (tmp_path / "c.log").read_text()[-3000:]
    assert workers["a"].wait(timeout=5) == -signal.SIGKILL

    ids = [g["id"] for g in seen()]
    assert set(ids) == expected  # every prompt, once the sink dedups by id
    assert duplicates(ids) <= CONCURRENCY  # re-done: only what the killed worker had in flight
