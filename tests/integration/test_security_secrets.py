"""Secrets stay secret: the SGLang API key and the SASL password never reach logs, errors, metrics or --help;
metrics endpoints listen on loopback only."""

from __future__ import annotations

import argparse
import os
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from eaglefeed.cli._common import add_kafka_args, kafka_config
from eaglefeed.consumers.generate import run_worker
from eaglefeed.core.config import KafkaConfig, WorkerConfig, metrics_host
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.kafka import connection_settings
from tests.cli import kafka_flags, start_cli
from tests.conftest import free_port
from tests.factories import make_prompt
from tests.integration.worker_support import count_generations, publish_prompts
from tests.running import wait_until

KEY = f"sk-eaglefeed-{uuid.uuid4().hex}"


def test_security_settings_reach_kafka_python_and_stay_out_of_repr():
    cfg = KafkaConfig(security_protocol="SASL_SSL", sasl_mechanism="scram-sha-512", sasl_username="alice",
                      sasl_password=KEY, ssl_cafile="/ca.pem", ssl_check_hostname=False)
    settings = connection_settings(cfg)
    assert settings["security_protocol"] == "SASL_SSL" and settings["sasl_mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl_plain_password"] == KEY and settings["ssl_cafile"] == "/ca.pem"
    assert settings["ssl_check_hostname"] is False
    assert KEY not in repr(cfg)
    assert "security_protocol" not in connection_settings(KafkaConfig())  # PLAINTEXT: kafka-python defaults
    for bad in (KafkaConfig(security_protocol="SASL_SSL", sasl_username="a", sasl_password=KEY),
                KafkaConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_password=KEY),
                KafkaConfig(security_protocol="TLS")):
        with pytest.raises(ConfigError) as err:
            connection_settings(bad)
        assert KEY not in str(err.value)
    assert KEY not in repr(WorkerConfig(kafka=cfg, sglang_urls=("http://x",), api_key=KEY))


def test_security_flags_and_environment(monkeypatch, tmp_path, capsys):
    secret = tmp_path / "password"
    secret.write_text(KEY + "\n")
    monkeypatch.setenv("EAGLEFEED_SASL_PASSWORD", f"@{secret}")
    monkeypatch.setenv("EAGLEFEED_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("EAGLEFEED_SSL_CHECK_HOSTNAME", "false")
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_kafka_args(parser)
    cfg = kafka_config(parser.parse_args(["--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "bob"]),
                       "t")
    assert cfg.security_protocol == "SASL_SSL"
    assert (cfg.sasl_mechanism, cfg.sasl_username) == ("SCRAM-SHA-512", "bob")
    assert cfg.sasl_password == KEY and cfg.ssl_check_hostname is False
    flagged = kafka_config(parser.parse_args(["--sasl-password", "inline", "--ssl-check-hostname"]), "t")
    assert flagged.sasl_password == "inline" and flagged.ssl_check_hostname is True  # a flag beats the env
    monkeypatch.setenv("EAGLEFEED_SASL_PASSWORD", KEY)
    parser.print_help()
    assert KEY not in capsys.readouterr().out


def test_metrics_bind_to_loopback_by_default(monkeypatch):
    monkeypatch.delenv("EAGLEFEED_METRICS_HOST", raising=False)
    assert metrics_host() == "127.0.0.1"
    assert metrics_host({"EAGLEFEED_METRICS_HOST": "0.0.0.0"}) == "0.0.0.0"


@pytest.mark.kafka
def test_api_key_never_in_logs_errors_or_metrics(kafka_config, standin_factory, tmp_path):
    url = standin_factory("--latency-model", "none", "--output-len-mean", "16", "--api-key", KEY)
    key_file = tmp_path / "sglang-key"
    key_file.write_text(KEY + "\n")
    prompts = [make_prompt(i) for i in range(8)]
    publish_prompts(kafka_config, prompts, partitions=2)
    port = free_port()
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "EAGLEFEED_METRICS_HOST"}
    worker = start_cli("--log-level", "debug", "generate", "--sglang-url", url, "--api-key", f"@{key_file}",
                       "--metrics-port", str(port), "--commit-interval", "0.2", *kafka_flags(kafka_config),
                       log=log, env=env)
    try:
        # the stand-in only answers requests that carry the key as a bearer token
        wait_until(lambda: count_generations(kafka_config) >= len(prompts), timeout=60, what="generations")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "eaglefeed_worker" in metrics and KEY not in metrics
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert "DEBUG" in text and KEY not in text

    # a wrong key stops the worker with an error that names the problem, not the key (on new prompts:
    # the ones above are durable already, and a worker never pays for those again)
    publish_prompts(kafka_config, [make_prompt(100 + i) for i in range(2)], partitions=2)
    wrong = f"{KEY}-wrong"
    with pytest.raises(Exception) as failed:
        run_worker(WorkerConfig(kafka=kafka_config, sglang_urls=(url,), api_key=wrong, group_id="wrong-key",
                                exit_when_idle=10, commit_interval=0.2))
    chain = repr(failed.value) + repr(failed.value.__cause__) + str(failed.value.__cause__)
    assert "401" in chain and wrong not in chain and KEY not in chain


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on ``port`` (read from /proc, no traffic sent)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            host, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(_address(host, width))
    return found


def _address(hexhost: str, width: int) -> str:
    if width == 8:
        return ".".join(str(b) for b in reversed(bytes.fromhex(hexhost)))
    return "ipv6:" + hexhost


