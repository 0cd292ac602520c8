"""A generate worker reports its servers on ``<prefix>.workers``, and ``eaglefeed status`` shows them."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from eaglefeed.core.config import WorkerConfig
from eaglefeed.ops.worker_status import WorkersFeed
from eaglefeed.schemas.worker_status import workers_topic
from tests.cli import kafka_flags, run_cli
from tests.factories import make_prompt
from tests.integration.worker_support import publish_prompts
from tests.running import WorkerThread, wait_until

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("exactly_once", [False, True], ids=["acked", "exactly-once"])
def test_status_shows_the_running_workers_servers_and_forgets_a_clean_stop(kafka_config, standin_factory,
                                                                           exactly_once):
    # slow enough (~1 s per request) that the worker is still busy when status looks
    url = standin_factory("--latency-model", "batching", "--decode-step-ms", "20", "--output-len-mean", "50",
                          "--output-len-sigma", "0.2")
    publish_prompts(kafka_config, [make_prompt(i) for i in range(300)], partitions=2)
    worker = WorkerThread(WorkerConfig(kafka=kafka_config, sglang_urls=(url,), worker_id="wstatus-a",
                                       settle_seconds=0.0, commit_interval=0.2, drain_seconds=5,
                                       exactly_once=exactly_once))
    feed = WorkersFeed(kafka=kafka_config)
    try:
        def reported() -> bool:
            report = feed.read().reports.get("wstatus-a")
            return report is not None and report["rows_done"] > 0

        wait_until(reported, timeout=60, what="a status record of the worker with rows done")
        view = feed.read()
        report = view.reports["wstatus-a"]
        assert report["concurrency"] is None and not view.stale(report)  # --concurrency auto, fresh
        [server] = report["servers"]
        assert server["url"] == url and server["healthy"] and server["limit"] >= 4
        assert server["running"] is not None and server["waiting"] is not None  # the stand-in has /metrics

        out = run_cli("status", "--once", "--interval", "0.2", *kafka_flags(kafka_config), timeout=120)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert f"workers: 1 reporting in {workers_topic(kafka_config.topic_prefix)}" in lines
        worker_line = next(line for line in lines if line.strip().startswith("wstatus-a"))
        assert worker_line.split()[1] == "auto" and "STALE" not in worker_line
        server_line = next(line for line in lines if line.strip().startswith(url))
        limit = server_line.split()[1]
        assert limit.isdigit() and int(limit) >= 4, server_line
        # the worker is busy: the generate row shows the prompts it reports in flight
        in_flight = next(line for line in lines if line.startswith("generate")).split()[3]
        assert in_flight.isdigit(), out.stdout
    finally:
        worker.stop.set()
        worker.join(60)
    try:
        assert "wstatus-a" not in feed.read().reports  # the clean stop's tombstone
    finally:
        feed.close()

    topic = workers_topic(kafka_config.topic_prefix)
    admin = KafkaAdminClient(bootstrap_servers=kafka_config.bootstrap_servers)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    configs = described["topic"][topic]
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["delete.retention.ms"]["value"] == "60000"  # a stopped worker's tombstone goes soon


def test_status_without_a_workers_topic_says_no_worker_reports(kafka_config):
    publish_prompts(kafka_config, [make_prompt(0)], partitions=1)  # a pipeline, but no worker ever ran
    out = run_cli("status", "--once", "--interval", "0.1", *kafka_flags(kafka_config), timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"workers: no worker reports in {workers_topic(kafka_config.topic_prefix)}" in out.stdout
    assert "Traceback" not in out.stderr
