"""A real Prometheus scrapes a running pipeline; every PromQL expression of the dashboard returns data.

Also checks that compose.yaml, the scrape config and the dashboard agree with each other and with
the CLI.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from eaglefeed.cli.main import build_parser
from eaglefeed.consumers.converse import run_converse
from eaglefeed.consumers.generate import run_worker
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import (
    ConverseConfig,
    ProducerConfig,
    PromptSettings,
    SamplingDefaults,
    SinkConfig,
    WorkerConfig,
)
from eaglefeed.core.kafka import make_producer
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.producers import run_producer
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "eaglefeed.json"


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_compose_is_consistent_with_the_cli_and_the_deploy_files():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"sglang", "producer", "generate", "converse", "sink", "prometheus", "grafana"} <= set(services)
    assert {"kafka-1", "kafka-2", "kafka-3"} <= set(services)  # three brokers, three controller voters
    parser = build_parser()
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    scrape_targets = json.dumps(scrape)
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        for volume in svc.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("./"):
                assert (ROOT / host).exists() or host == "./inbox", f"{name} mounts missing {host}"
        command = svc.get("command")
        if isinstance(command, str) and command.startswith("eaglefeed "):
            argv = shlex.split(command)[1:]
            args = parser.parse_args(argv)  # every flag in compose exists in the CLI
            assert args.metrics_port is not None, f"{name} must serve /metrics"
            assert f"{name}:{args.metrics_port}" in scrape_targets or f'"{name}"' in scrape_targets
            assert svc["environment"]["EAGLEFEED_METRICS_HOST"] == "0.0.0.0"
    assert (ROOT / "Dockerfile").exists()
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    assert (provisioning / "dashboards" / "eaglefeed.yml").exists()
    assert (provisioning / "datasources" / "prometheus.yml").exists()
    assert "sglang:30000" in scrape_targets  # SGLang's own sglang:* metrics beside ours


@pytest.mark.kafka
@pytest.mark.slow
def test_every_dashboard_query_returns_data(kafka_config, standin_factory, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (make test installs Debian's package)")
    url = standin_factory("--max-running-requests", "2", "--decode-step-ms", "4", "--output-len-mean", "60",
                          "--context-length", "400", "--fault-503-rate", "0.1")
    ports = {"producer": free_port(), "worker": free_port(), "sink": free_port(),
             "converse": free_port()}
    prompts = tmp_path / "prompts.jsonl"
    lines = SAMPLE_PROMPTS.read_text().splitlines()[:80]
    prompts.write_text("\n".join([*lines, "{not json", '{"messages": []}']) + "\n")
    summary = run_producer(ProducerConfig(kafka=kafka_config, inputs=(str(prompts),), partitions=2,
                                          metrics_port=ports["producer"], prompts=PromptSettings(
                                              tokenizer=str(TOKENIZER_DIR),
                                              sampling=SamplingDefaults(max_new_tokens=128))))
    assert summary.dead_lettered == 2
    conversations = tmp_path / "conversations.jsonl"  # multi-turn rows, regenerated turn by turn
    conversations.write_text("".join(line + "\n" for line in SAMPLE_PROMPTS.read_text().splitlines()
                                     if line.count('"role": "user"') > 1))
    run_producer(ProducerConfig(kafka=kafka_config, inputs=(str(conversations),), partitions=2,
                                prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR), history="rerender",
                                                       sampling=SamplingDefaults(max_new_tokens=64))))
    garbage = make_producer(kafka_config)
    garbage.send(kafka_config.generations_topic, key=b"junk", value=b"\x00garbage")
    garbage.flush()
    garbage.close()

    stop_worker, stop_sink, stop_converse = StopSignal(), StopSignal(), StopSignal()
    threads = [
        threading.Thread(target=run_worker, kwargs={"stop": stop_worker}, args=(WorkerConfig(
            kafka=kafka_config, sglang_urls=(url,), concurrency=4, metrics_port=ports["worker"],
            max_attempts=8),)),
        threading.Thread(target=run_sink, kwargs={"stop": stop_sink}, args=(SinkConfig(
            kafka=kafka_config, output=tmp_path / "data", flush_seconds=1, metrics_port=ports["sink"]),)),
        threading.Thread(target=run_converse, kwargs={"stop": stop_converse}, args=(ConverseConfig(
            kafka=kafka_config, metrics_port=ports["converse"]),)),
    ]
    for t in threads:
        t.start()
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    targets = [f"127.0.0.1:{p}" for p in ports.values()] + [url.removeprefix("http://")]
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "pipeline", "static_configs": [{"targets": targets}]}]}))
    prom = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        missing = _wait_for_all(f"http://127.0.0.1:{prom_port}", dashboard_exprs(), timeout=90)
        assert not missing, f"dashboard queries without data: {missing}"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        stop_worker.set()
        stop_sink.set()
        stop_converse.set()
        for t in threads:
            t.join(timeout=60)


def _wait_for_all(base: str, exprs: list[str], timeout: float) -> list[str]:
    pending = list(exprs)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        time.sleep(1.0)
        still = []
        for expr in pending:
            try:
                resp = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
            except httpx.TransportError:
                still.append(expr)
                continue
            assert resp["status"] == "success", (expr, resp)
            values = [r["value"][1] for r in resp["data"]["result"]]
            if not values or all(v == "NaN" for v in values):
                still.append(expr)
        pending = still
    return pending
