"""Two workers started together on a full prompts topic: the first rebalance cancels no GPU work."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest

from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from tests.factories import make_prompt
from tests.integration.worker_support import (
    generations,
    publish_prompts,
    spawn_worker,
)
from tests.running import WorkerThread, wait_until

pytestmark = pytest.mark.kafka
PROMPTS = 400
CONCURRENCY = 32


def _standin_counter(url: str, name: str) -> int:
    """A counter of the stand-in's /metrics (summed over its labels)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(sum(float(m) for m in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)))


def test_two_workers_started_together_send_each_prompt_once(kafka_config, standin_factory, tmp_path: Path):
    # ~1 s per request: the first member's whole window is in flight when the second one joins
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "20", "--output-len-mean", "50",
                          "--output-len-sigma", "0.2", "--max-running-requests", "128")
    prompts = [make_prompt(i) for i in range(PROMPTS)]
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 6))
    publish_prompts(kafka_config, prompts, partitions=6)  # a backlog, as when a run is started
    flags = ["--concurrency", str(CONCURRENCY), "--commit-interval", "0.2", "--drain-seconds", "20"]
    first = spawn_worker(kafka_config, url, tmp_path / "a.log", "--worker-id", "a", *flags)
    # The second one joins a second after the first was given every partition (it runs in this
    # process, so it starts in well under a second): the order of "started together" made certain.
    wait_until(lambda: "assigned [" in (tmp_path / "a.log").read_text(), timeout=60,
               what="the first member's assignment")
    second = WorkerThread(WorkerConfig(kafka=kafka_config, sglang_urls=(url,), worker_id="b",
                                       concurrency=CONCURRENCY, commit_interval=0.2, drain_seconds=20))
    expected = {f"{p['prompt_id']}:0" for p in prompts}
    try:
        wait_until(lambda: {g["id"] for _r, g in generations(kafka_config)} >= expected, timeout=120,
                   what="every prompt to be generated")
    finally:
        first.send_signal(signal.SIGTERM)
        second.stop.set()
        first.wait(timeout=60)
        second.join(timeout=60)
    log = (tmp_path / "a.log").read_text()
    cancelled = sum(int(n) for n in re.findall(r"cancelling (\d+) in-flight prompts of revoked", log))
    requests = _standin_counter(url, "sglang:num_requests_total")
    aborted = _standin_counter(url, "sglang:num_aborted_requests_total")
    report = f"cancelled {cancelled}, requests {requests} for {PROMPTS} prompts, aborted {aborted}"
    print(report)
    assert {g["worker_id"] for _r, g in generations(kafka_config)} == {"a", "b"}, report  # both worked
    assert cancelled == 0, report
    assert aborted == 0, report
    assert requests == PROMPTS, report


def _committed(kafka_config) -> int:
    """Offsets the workers' group committed on the prompts topic, summed."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_config.bootstrap_servers)
    try:
        group = kafka_config.default_group("generate")
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    finally:
        admin.close()
    return sum(o.offset for tp, o in offsets.items() if tp.topic == kafka_config.prompts_topic)


def test_prompts_published_again_before_the_workers_caught_up_are_not_generated_again(
        kafka_config, standin_factory, tmp_path: Path):
    # what `produce --restart` does: the same records (same keys, so the same partitions) again,
    # while the workers are still busy with the first copies
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "10", "--output-len-mean", "30",
                          "--output-len-sigma", "0.2", "--max-running-requests", "128")
    prompts = [make_prompt(i) for i in range(PROMPTS)]
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 6))
    publish_prompts(kafka_config, prompts, partitions=6)
    flags = ["--concurrency", str(CONCURRENCY // 2), "--commit-interval", "0.2", "--drain-seconds", "20"]
    workers = {name: spawn_worker(kafka_config, url, tmp_path / f"{name}.log", "--worker-id", name, *flags)
               for name in ("a", "b")}
    try:
        wait_until(lambda: len(generations(kafka_config)) >= PROMPTS // 4, timeout=120,
                   what="a quarter of the prompts")
        publish_prompts(kafka_config, prompts, partitions=6)  # the restarted producer
        wait_until(lambda: _committed(kafka_config) >= 2 * PROMPTS, timeout=120,
                   what="both copies to be consumed")
    finally:
        for proc in workers.values():
            proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            proc.wait(timeout=60)
    requests = _standin_counter(url, "sglang:num_requests_total")
    ids = [g["id"] for _r, g in generations(kafka_config)]
    report = f"requests {requests} for {PROMPTS} prompts published twice, {len(ids)} generations"
    print(report)
    assert set(ids) == {f"{p['prompt_id']}:0" for p in prompts}, report
    assert requests == PROMPTS, report
