"""Flags of the stand-in: every flag documented, defaults round-trip into the config."""

from __future__ import annotations

import argparse

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin import StandinConfig, add_arguments
from eaglefeed.devtools.standin.cli import config_from_args


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p


def test_every_flag_has_help_with_its_default():
    for action in parser()._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        assert "default" in action.help, action.dest


def test_defaults_match_the_config_defaults():
    config = config_from_args(parser().parse_args([]))
    assert config.tokenizer == TOKENIZER_DIR
    assert config == StandinConfig(tokenizer=TOKENIZER_DIR)
    assert (config.host, config.port, config.context_length) == ("127.0.0.1", 30000, 8192)
    assert config.max_running_requests == 64 and config.max_queued_requests is None
    assert config.model_path == "eaglefeed/standin-demo" and config.latency_model == "batching"


def test_flags_reach_the_config():
    args = parser().parse_args(
        [
            "--latency-model",
            "none",
            "--max-queued-requests",
            "3",
            "--fault-reset-rate",
            "0.5",
            "--fault-seed",
            "9",
            "--incremental-streaming-output",
            "--api-key",
            "k",
            "--think-fraction",
            "1",
        ]
    )
    config = config_from_args(args)
    assert config.latency_model == "none" and config.max_queued_requests == 3
    assert config.faults.reset == 0.5 and config.faults.seed == 9
    assert config.incremental_streaming_output and config.api_key == "k" and config.think_fraction == 1.0


def test_exported_members():
    import eaglefeed.devtools.standin as standin

    assert standin.__all__ == ["StandinConfig", "add_arguments", "build_app", "run"]
    for name in standin.__all__:
        assert callable(getattr(standin, name))
    assert "stand-in" in standin.__doc__.lower() and "not sglang" in standin.__doc__.lower()
