"""Two sinks of different groups on one --output: the second is refused before it writes a row."""

from __future__ import annotations

import pytest

from eaglefeed.cli.main import main
from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.core.lifecycle import StopSignal

pytestmark = pytest.mark.kafka


def test_a_second_sink_group_on_one_output_is_refused(kafka_config, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(StopSignal, "install", lambda self: self)
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 2))
    out = tmp_path / "data"
    run_sink(SinkConfig(kafka=kafka_config, output=out, group_id="first", exit_when_idle=1))
    argv = ["sink", "--output", str(out), "--bootstrap-servers", kafka_config.bootstrap_servers,
            "--topic-prefix", kafka_config.topic_prefix, "--exit-when-idle", "1"]
    caplog.clear()
    assert main([*argv, "--group-id", "second"]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "belongs to the sink of group 'first'" in errors[0], errors
    assert "\n" not in errors[0]
    assert main([*argv, "--group-id", "first"]) == 0  # the owner itself may come back
