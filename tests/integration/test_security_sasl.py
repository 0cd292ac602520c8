"""Kafka SASL_SSL: the pipeline against a real broker with SCRAM-SHA-512 and TLS (certificates made here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import KafkaUnreachableError
from eaglefeed.core.kafka import make_admin
from eaglefeed.devtools import localbroker
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.devtools.localbroker.security import BrokerSecurity
from tests.cli import run_cli
from tests.conftest import cache_dir, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]

PASSWORD = f"alice-{uuid.uuid4().hex}"


def make_certificates(folder: Path) -> dict[str, Path]:
    """A throw-away CA and a broker certificate for 127.0.0.1, as PEM files."""
    folder.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=eaglefeed test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                    "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                    "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.pem", "-days", "2", "-extfile", "ext.cnf")
    return {name: folder / f"{name}" for name in ("ca.pem", "broker.pem", "broker.key")}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConfig]:
    """A second local broker that serves SASL_SSL only; yields a client config for user alice."""
    root = tmp_path_factory.mktemp("sasl-broker")
    certs = make_certificates(root / "tls")
    security = BrokerSecurity(certfile=certs["broker.pem"], keyfile=certs["broker.key"],
                              cafile=certs["ca.pem"], users={"alice": PASSWORD})
    status = localbroker.start(data_dir=root / "data", port=free_port(), cache_dir=cache_dir(),
                               security=security)
    try:
        assert status.bootstrap_servers
        yield KafkaConfig(bootstrap_servers=status.bootstrap_servers, topic_prefix=f"s{uuid.uuid4().hex[:8]}",
                          security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                          sasl_username="alice", sasl_password=PASSWORD, ssl_cafile=str(certs["ca.pem"]))
    finally:
        localbroker.stop(root / "data")


def test_pipeline_runs_over_sasl_ssl(secure_broker, standin_factory, tmp_path):
    kafka = secure_broker
    url = standin_factory("--latency-model", "none", "--output-len-mean", "16")
    secret = tmp_path / "kafka-password"
    secret.write_text(PASSWORD + "\n")
    prompts = tmp_path / "prompts.jsonl"
    rows = [json.loads(line) for line in SAMPLE_PROMPTS.read_text().splitlines()[:12]]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "dataset"
    common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topic_prefix]
    flags = ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
             "--sasl-username", "alice", "--sasl-password", f"@{secret}", "--ssl-cafile", kafka.ssl_cafile]
    env = {**os.environ, "EAGLEFEED_SECURITY_PROTOCOL": "SASL_SSL",
           "EAGLEFEED_SASL_MECHANISM": "SCRAM-SHA-512", "EAGLEFEED_SASL_USERNAME": "alice",
           "EAGLEFEED_SASL_PASSWORD": f"@{secret}", "EAGLEFEED_SSL_CAFILE": kafka.ssl_cafile}
    logs = {}

    def run(name: str, args: list[str], environ: dict[str, str] | None = None) -> None:
        done = run_cli(*args, *common, env=environ, timeout=180)
        logs[name] = done.stdout + done.stderr
        assert done.returncode == 0, logs[name]

    # flags for the producer, the environment alone for the worker (with transactions), both for the sink
    run("produce", ["produce", str(prompts), "--tokenizer", str(TOKENIZER_DIR), "--workers", "0",
                    "--max-new-tokens", "32", *flags])
    run("generate", ["generate", "--sglang-url", url, "--exactly-once", "--exit-when-idle", "3",
                     "--commit-interval", "0.2"], env)
    run("sink", ["sink", "--output", str(output), "--flush-seconds", "0.5", "--exit-when-idle", "3",
                 "--sasl-password", f"@{secret}"], env)

    table = pq.read_table(output / "segments", columns=["id", "source_row"])
    assert table.num_rows == len(rows) == len(set(table.column("id").to_pylist()))
    assert sorted(table.column("source_row").to_pylist()) == sorted(r["id"] for r in rows)
    for name, text in logs.items():
        assert PASSWORD not in text, f"the SASL password leaked into the {name} output"


@pytest.mark.serial  # under load, kafka-python can see the refusal as a dropped socket and retry it
def test_wrong_password_and_plaintext_are_refused(secure_broker):
    quick = {"bootstrap_timeout_ms": 4000, "request_timeout_ms": 4000}
    wrong = replace(secure_broker, sasl_password="not-" + PASSWORD)
    started = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match="Authentication") as refused:  # at once, one line
        make_admin(wrong, **quick).close()
    assert PASSWORD not in str(refused.value) and time.monotonic() - started < 20
    plaintext = KafkaConfig(bootstrap_servers=secure_broker.bootstrap_servers, connect_timeout=5)
    with pytest.raises(KafkaUnreachableError, match=secure_broker.bootstrap_servers):
        make_admin(plaintext, **quick).close()
    admin = make_admin(secure_broker, **quick)  # the right settings work at once
    try:
        assert isinstance(admin.list_topics(), list)
    finally:
        admin.close()
