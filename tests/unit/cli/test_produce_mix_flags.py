"""``produce --temperature-cycle`` / ``--template-kwargs-cycle`` on the command line: what they build,
the run's start-up note, and one line naming the flag for every mistake."""

from __future__ import annotations

import json
import shutil

import pytest

from eaglefeed.cli.main import build_parser, main
from eaglefeed.cli.produce import producer_config
from eaglefeed.core.config import ProducerConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR


def config(*argv: str) -> ProducerConfig:
    argv = ("produce", "in.jsonl", "--tokenizer", str(TOKENIZER_DIR), *argv)
    return producer_config(build_parser().parse_args(list(argv)))


def test_the_flags_build_the_runs_mix_and_the_start_up_note_says_it():
    cfg = config("--temperature-cycle", "0,0.6:2,1.0", "--template-kwargs-cycle",
                 "reasoning_effort=low:4,medium:4,high:2")
    mix = cfg.prompts.mix
    assert mix.temperatures == ((0.0, 1), (0.6, 2), (1.0, 1))
    assert [dict(kw) for kw, _ in mix.template_kwargs] == [
        {"reasoning_effort": "low"}, {"reasoning_effort": "medium"}, {"reasoning_effort": "high"}]
    assert "sampling mix" in cfg.sampling_note and "temperature 0.0:1, 0.6:2, 1.0:1" in cfg.sampling_note
    assert not config().prompts.mix.active and "sampling mix" not in config().sampling_note


def test_the_environment_variable_sets_a_cycle_too(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_PRODUCE_TEMPERATURE_CYCLE", "0.2,0.8")
    assert config().prompts.mix.temperatures == ((0.2, 1), (0.8, 1))


def test_a_temperature_cycle_is_not_overridden_by_the_models_generation_config(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(TOKENIZER_DIR, model)
    (model / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9}))
    cfg = producer_config(build_parser().parse_args(
        ["produce", "in.jsonl", "--tokenizer", str(model), "--temperature-cycle", "0,1"]))
    assert "temperature=" not in cfg.sampling_note and "top_p=0.9" in cfg.sampling_note


@pytest.mark.parametrize("flags, expected", [
    (["--temperature-cycle", "0,warm"], "eaglefeed produce: --temperature-cycle '0,warm': entry 2 ('warm') "
                                        "is not a number"),
    (["--temperature-cycle", "0,1", "--temperature", "0.7"],
     "eaglefeed produce: --temperature and --temperature-cycle exclude each other"),
    (["--template-kwargs-cycle", '{"reasoning_effort":"low"}'],
     "eaglefeed produce: --template-kwargs-cycle '{\"reasoning_effort\":\"low\"}': expected KEY=VALUE"),
])
def test_a_bad_cycle_stops_produce_with_one_line_naming_the_flag(flags, expected, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["produce", "in.jsonl", "--tokenizer", str(TOKENIZER_DIR), *flags])
    message = str(stopped.value.code)
    assert message.startswith(expected) and "\n" not in message
