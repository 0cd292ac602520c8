"""``--config FILE``: a TOML section per command, under the environment and the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglefeed.cli._config_file import ConfigFileError, config_path, load_config
from eaglefeed.cli.main import build_parser, main

RUN = """
[pipeline]
bootstrap_servers = "kafka:9092"
topic-prefix = "qwen3"

[generate]
sglang_url = ["http://gpu1:30000", "http://gpu2:30000"]
concurrency = 128
exactly_once = true
topic_prefix = "mine"

[sink]
output = "data/qwen3"
"""


@pytest.fixture
def parser(tmp_path, monkeypatch):
    for name in ("EAGLEFEED_GENERATE_CONCURRENCY", "EAGLEFEED_BOOTSTRAP_SERVERS", "EAGLEFEED_TOPIC_PREFIX",
                 "EAGLEFEED_CONFIG", "EAGLEFEED_SINK_OUTPUT"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "run.toml"
    path.write_text(RUN)
    p = build_parser()
    load_config(p, path)
    return p


def test_each_command_reads_its_section_and_the_pipeline_one(parser):
    gen = parser.parse_args(["generate"])
    assert gen.sglang_urls == ["http://gpu1:30000", "http://gpu2:30000"]
    assert (gen.concurrency, gen.exactly_once, gen.bootstrap_servers) == (128, True, "kafka:9092")
    assert gen.topic_prefix == "mine"  # its own section wins over [pipeline]
    sink = parser.parse_args(["sink"])  # required --output comes from the file
    assert (str(sink.output), sink.topic_prefix) == ("data/qwen3", "qwen3")
    assert sink.bootstrap_servers == "kafka:9092"


def test_the_environment_and_flags_override_the_file(parser, monkeypatch):
    monkeypatch.setenv("EAGLEFEED_GENERATE_CONCURRENCY", "7")
    assert parser.parse_args(["generate"]).concurrency == 7
    args = parser.parse_args(["generate", "--concurrency", "4", "--sglang-url", "http://x:1"])
    assert (args.concurrency, args.sglang_urls) == (4, ["http://x:1"])


@pytest.mark.parametrize(("text", "message"), [
    ("[generate]\nconcurency = 3\n", "[generate] unknown key 'concurency' (did you mean 'concurrency'?)"),
    ("[generat]\nconcurrency = 3\n", "unknown section [generat] (did you mean [generate]?)"),
    ("[pipeline]\nconcurrency = 3\n",
     "'concurrency' is not a pipeline-wide setting: put it under [generate]"),
    ("x = 1\n", "x = ... is outside a section"),
    ("[generate\n", "is not valid TOML"),
])
def test_a_wrong_file_is_one_line_naming_the_closest_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        load_config(build_parser(), path)
    assert message in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(("text", "message"), [
    ("[produce]\nconcurrency = 8\n", "[produce] unknown key 'concurrency'; eaglefeed generate and capture "
                                     "have it: put it under [generate] or [capture]"),
    ("[produce]\nworker = 8\n", "[produce] unknown key 'worker' (did you mean 'workers'?)"),
    ("[sink]\ndrain_seconds = 2\n", "[sink] unknown key 'drain_seconds' (did you mean 'stall_seconds'?); "
                                     "eaglefeed generate has it: put it under [generate]"),
])
def test_another_commands_key_is_unknown_for_its_section_and_names_the_command_that_has_it(tmp_path, text,
                                                                                          message):
    """Not "not a pipeline-wide setting": the key is in a command's section, just not that command's."""
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        load_config(build_parser(), path)
    assert str(info.value) == f"{path}: {message}"


def test_the_cli_finds_the_file_anywhere_and_says_a_bad_value_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EAGLEFEED_CONFIG", raising=False)
    path = tmp_path / "bad.toml"
    path.write_text('[stats]\njson = "maybe"\n')
    assert config_path(["stats", "--config", str(path), "x"]) == path
    assert config_path([f"--config={path}", "stats"]) == path
    assert config_path(["stats", "--", "--config", "x"]) is None
    monkeypatch.setenv("EAGLEFEED_CONFIG", str(path))
    assert config_path(["stats"]) == path
    with pytest.raises(SystemExit) as info:
        main(["stats", "--config", str(path), str(tmp_path)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path} [stats] json = 'maybe'" in err[0], err


def test_status_takes_the_dataset_and_the_groups_from_the_stages_sections(tmp_path, monkeypatch):
    """``status --config run.toml`` shows the run the file describes: [sink] output, the stages' group ids."""
    for name in ("EAGLEFEED_SINK_OUTPUT", "EAGLEFEED_GENERATE_GROUP_ID", "EAGLEFEED_SINK_GROUP_ID"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "run.toml"
    path.write_text('[pipeline]\ntopic_prefix = "qwen3"\n'
                    '[sink]\noutput = "data/qwen3"\ngroup_id = "sinks-b"\n'
                    '[generate]\ngroup_id = "workers-b"\n')
    parser = build_parser()
    load_config(parser, path)
    status = parser.parse_args(["status"])
    assert (status.output, status.generate_group, status.sink_group) == (
        Path("data/qwen3"), "workers-b", "sinks-b")
    assert not status.converse_group and status.topic_prefix == "qwen3"  # default: <prefix>-converse
    path.write_text('[sink]\noutput = "data/qwen3"\n[status]\noutput = "data/other"\n')
    parser = build_parser()
    load_config(parser, path)
    assert parser.parse_args(["status"]).output == Path("data/other")  # its own section wins
    assert parser.parse_args(["status", "--output", "x"]).output == Path("x")  # and a flag over both
