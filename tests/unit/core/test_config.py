"""Config: validation, defaults declared once (the CLI and render settings derive them), derived values."""

from __future__ import annotations

import ast
import dataclasses
import os
import pickle
from pathlib import Path

import pytest

from eaglefeed.chat.sampling import SAMPLING_KEYS, check_sampling
from eaglefeed.cli import produce as produce_cli
from eaglefeed.cli.generate import worker_config
from eaglefeed.cli.main import build_parser
from eaglefeed.cli.produce import producer_config
from eaglefeed.cli.sink import sink_config
from eaglefeed.core.config import (
    DEFAULT_CACHE_DIR,
    DEFAULT_SGLANG_URL,
    KafkaConfig,
    ProducerConfig,
    PromptSettings,
    SamplingDefaults,
    SinkConfig,
    WorkerConfig,
    cache_dir,
    env_lookup,
    metrics_host,
    parse_bool,
    producer_state_dir,
    read_secret,
)
from eaglefeed.core.errors import ConfigError

KAFKA = KafkaConfig()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("EAGLEFEED_"):
            monkeypatch.delenv(name)


def parse(argv: list[str]):
    return build_parser().parse_args(argv)


def differing_fields(a: object, b: object, *, ignore: tuple[str, ...] = ()) -> dict[str, tuple]:
    return {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
            if f.name not in ignore and getattr(a, f.name) != getattr(b, f.name)}


def test_the_cli_defaults_are_the_config_defaults():
    worker = worker_config(parse(["generate"]))
    assert differing_fields(worker, WorkerConfig(kafka=KAFKA, sglang_urls=(DEFAULT_SGLANG_URL,)),
                            ignore=("kafka", "worker_id")) == {}
    producer = producer_config(parse(["produce", "in.jsonl", "--tokenizer", "tok"]))
    expected = ProducerConfig(kafka=KAFKA, inputs=("in.jsonl",), prompts=PromptSettings(tokenizer="tok"))
    # progress: the CLI's default is "when stderr is a terminal"; the CLI resumes by default
    # (a ledger in producer_state_dir(), whatever the working directory), a library caller only
    # with a state_dir; sampling_note: the CLI says where the sampling defaults came from
    ignored = ("kafka", "progress", "state_dir", "sampling_note")
    assert differing_fields(producer, expected, ignore=ignored) == {}
    assert differing_fields(producer.prompts, expected.prompts) == {}
    assert producer.state_dir == producer_state_dir() == cache_dir() / "produce"
    assert producer.state_dir.is_absolute()
    sink = sink_config(parse(["sink", "--output", "out"]))
    assert differing_fields(sink, SinkConfig(kafka=KAFKA, output=Path("out")), ignore=("kafka",)) == {}
    for cfg in (worker, producer, sink):
        assert differing_fields(cfg.kafka, KAFKA, ignore=("client_id",)) == {}


def test_flags_and_variables_reach_the_config(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_GENERATE_MAX_ATTEMPTS", "9")
    argv = ["generate", "--eject-after", "7", "--samples-mode", "n", "--vocab-size", "off"]
    cfg = worker_config(parse(argv))
    assert (cfg.max_attempts, cfg.eject_after, cfg.samples_mode, cfg.check_vocab) == (9, 7, "n", False)
    monkeypatch.setenv("EAGLEFEED_PRODUCE_TURNS", "all")
    monkeypatch.setenv("EAGLEFEED_PRODUCE_TOKENIZER", "/models/tok")
    cfg = producer_config(parse(["produce", "in.jsonl", "--top-p", "0.5", "--stop-token-ids", "7,8"]))
    prompts = cfg.prompts
    assert (prompts.tokenizer, prompts.turns, prompts.sampling.top_p, prompts.sampling.stop_token_ids) == (
        "/models/tok", "all", 0.5, (7, 8))


def test_produce_without_a_tokenizer_stops_with_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        producer_config(parse(["produce", "in.jsonl"]))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tokenizer is required" in err and "EAGLEFEED_PRODUCE_TOKENIZER" in err


def test_produce_takes_nothing_from_the_demo_assets():
    tree = ast.parse(Path(produce_cli.__file__).read_text(encoding="utf-8"))
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("eaglefeed.devtools") for m in modules)


def test_prompt_settings_pickle_for_render_processes_and_hold_no_kafka_settings():
    prompts = PromptSettings(tokenizer="tok", chat_template_kwargs={"enable_thinking": False},
                             sampling=SamplingDefaults(stop_token_ids=(1,)), skip_done=Path("ds"))
    assert pickle.loads(pickle.dumps(prompts)) == prompts
    assert not any(isinstance(getattr(prompts, f.name), KafkaConfig) for f in dataclasses.fields(prompts))


def test_sampling_defaults_are_complete_and_valid_sampling_params():
    params = SamplingDefaults().as_params()
    assert set(params) == SAMPLING_KEYS == {f.name for f in dataclasses.fields(SamplingDefaults)}
    assert check_sampling(params) == params
    assert SamplingDefaults(stop_token_ids=(5, 6)).as_params()["stop_token_ids"] == [5, 6]


def test_choices_are_validated():
    with pytest.raises(ConfigError, match="turns"):
        PromptSettings(tokenizer="t", turns="every")
    with pytest.raises(ConfigError, match="samples_mode"):
        WorkerConfig(kafka=KAFKA, sglang_urls=("http://x",), samples_mode="batch")
    assert WorkerConfig(kafka=KAFKA, sglang_urls=("http://x",), samples_mode="n").samples_mode == "n"


def test_topic_names_derive_from_the_prefix():
    cfg = KafkaConfig(topic_prefix="run7")
    assert (cfg.prompts_topic, cfg.generations_topic, cfg.dead_letter_topic) == (
        "run7.prompts", "run7.generations", "run7.dead-letter")


def test_secrets_stay_out_of_repr():
    assert "hunter2" not in repr(KafkaConfig(sasl_password="hunter2"))
    assert "sk-123" not in repr(WorkerConfig(kafka=KAFKA, sglang_urls=("http://x",), api_key="sk-123"))


def test_worker_ids_differ_per_config_unless_given():
    assert WorkerConfig(kafka=KAFKA, sglang_urls=("http://u",), worker_id="w1").worker_id == "w1"
    assert str(os.getpid()) in WorkerConfig(kafka=KAFKA, sglang_urls=("http://u",)).worker_id


@pytest.mark.parametrize(("text", "value"), [("1", True), ("TRUE", True), (" yes ", True), ("on", True),
                                             ("0", False), ("False", False), ("no", False), ("off", False)])
def test_parse_bool(text, value):
    assert parse_bool(text) is value


def test_parse_bool_rejects_other_words():
    with pytest.raises(ValueError, match="true"):
        parse_bool("maybe")


def test_env_lookup_takes_the_first_variable_set_and_skips_empty_ones():
    environ = {"EAGLEFEED_A": "", "EAGLEFEED_B": "b", "EAGLEFEED_C": "c"}
    assert env_lookup(["A", "B", "C"], environ) == ("EAGLEFEED_B", "b")
    assert env_lookup(["A", "Z"], environ) is None


def test_read_secret_reads_a_file_and_names_a_missing_one(tmp_path):
    (tmp_path / "key").write_text("sk-from-file\n")
    assert read_secret(f"@{tmp_path / 'key'}") == "sk-from-file"
    assert read_secret("inline") == "inline" and read_secret(None) is None
    with pytest.raises(ConfigError, match="missing"):
        read_secret(f"@{tmp_path / 'missing'}")


def test_cache_dir_and_metrics_host_come_from_the_environment_or_their_defaults():
    assert cache_dir({}) == DEFAULT_CACHE_DIR
    assert cache_dir({"EAGLEFEED_CACHE_DIR": "/cache"}) == Path("/cache")
    assert producer_state_dir({"EAGLEFEED_CACHE_DIR": "/cache"}) == Path("/cache/produce")
    assert metrics_host({}) == "127.0.0.1"
    assert metrics_host({"EAGLEFEED_METRICS_HOST": "0.0.0.0"}) == "0.0.0.0"
