"""Every option can come from EAGLEFEED_<COMMAND>_<FLAG> (pipeline-wide: EAGLEFEED_<FLAG>); a flag wins."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from eaglefeed.cli.main import build_parser, main
from eaglefeed.core.config import PIPELINE_WIDE_ENV, PromptSettings, SamplingDefaults, WorkerConfig

MISSING = object()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("EAGLEFEED_"):
            monkeypatch.delenv(name)


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser, **sub.choices}


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest not in ("help", "version")]


def variable(command: str, action: argparse.Action) -> str:
    flag = next(o for o in action.option_strings if o.startswith("--"))[2:].upper().replace("-", "_")
    if not command or flag in PIPELINE_WIDE_ENV:
        return "EAGLEFEED_" + flag
    return "EAGLEFEED_" + command.upper().replace("-", "_") + "_" + flag


def base_argv(command: str, parser: argparse.ArgumentParser, skip: argparse.Action | None) -> list[str]:
    """The command with its positionals and required options filled in, except ``skip``."""
    if not command:
        return ["stats", "dataset"]
    argv = [command]
    for action in parser._actions:
        if action is skip or action.dest == "help":
            continue
        value = str(action.choices[0]) if action.choices else "x"
        if not action.option_strings:
            argv.append(value)
        elif action.required:
            argv += [action.option_strings[0], value]
    return argv


def samples(action: argparse.Action) -> tuple[str, object, str, object]:
    """(env text, its value, flag text, its value) for ``action``; the flag's text differs from the env's."""
    if isinstance(action, argparse.BooleanOptionalAction):
        env = action.default is not True
        return ("yes" if env else "no"), env, "", not env
    if action.nargs == 0:  # store_true: the variable turns it on, so the flag is tested against "off"
        return "true", action.const, "", action.const
    if action.choices:
        others = [c for c in action.choices if c != action.default]
        return str(others[0]), others[0], str(action.default or others[-1]), action.default or others[-1]
    convert = action.type or str
    if isinstance(action, argparse._AppendAction):  # repeatable: a comma-separated list
        a, b, c = ("http://a", "http://b", "http://c") if action.dest == "sglang_urls" else ("a", "b", "c")
        return f"{a},{b}", [convert(a), convert(b)], c, [convert(c)]
    env, flag = ("8", "9") if action.default == convert("7") else ("7", "9")
    if action.nargs in ("+", "*"):  # several values after one flag: a list, from the variable too
        return env, [convert(env)], flag, [convert(flag)]
    return env, convert(env), flag, convert(flag)


def all_options():
    for command, parser in commands().items():
        for action in options(parser):
            name = f"{command or 'eaglefeed'} {action.option_strings[0]}"
            yield pytest.param(command, action.dest, id=name)


def find(command: str, dest: str) -> tuple[argparse.ArgumentParser, argparse.Action]:
    parser = commands()[command]
    return parser, next(a for a in options(parser) if a.dest == dest)


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


@pytest.mark.parametrize(("command", "dest"), list(all_options()))
def test_every_option_reads_its_variable_and_a_flag_wins(command, dest, monkeypatch):
    parser, action = find(command, dest)
    env_text, env_value, flag_text, flag_value = samples(action)
    argv = base_argv(command, parser, skip=action)
    name = variable(command, action)
    if action.required:  # without the variable, a required option is missing
        with pytest.raises(SystemExit):
            parse(argv)
        unset = MISSING
    else:
        unset = getattr(parse(argv), dest, MISSING)
    monkeypatch.setenv(name, env_text)
    from_env = getattr(parse(argv), dest, MISSING)
    assert from_env == env_value and from_env != unset, name

    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        monkeypatch.setenv(name, "false")  # off in the environment, on by the flag
    flag = action.option_strings[0] if flag_value is not False else action.option_strings[-1]
    at = 0 if not command else 1  # the top-level option goes before the command
    flags = [flag] if action.nargs == 0 else [flag, flag_text]
    assert getattr(parse([*argv[:at], *flags, *argv[at:]]), dest) == flag_value, name


def test_every_option_lists_its_variable_and_no_secret_in_help(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_GENERATE_API_KEY", "sk-secret-from-env")
    monkeypatch.setenv("EAGLEFEED_STUB_SGLANG_API_KEY", "sk-secret-from-env")
    monkeypatch.setenv("EAGLEFEED_SASL_PASSWORD", "pw-secret-from-env")
    for command, parser in commands().items():
        text = " ".join(parser.format_help().split())
        for action in options(parser):
            assert variable(command, action) in text, (command, action.option_strings)
        assert "secret-from-env" not in text


def test_help_shows_the_config_defaults():
    sampling = SamplingDefaults()
    model = "the model's generation_config.json beside the tokenizer, else "  # then the neutral value
    expected = {"produce": {"--max-new-tokens": sampling.max_new_tokens,
                            "--temperature": model + str(sampling.temperature),
                            "--top-p": model + str(sampling.top_p), "--min-p": model + str(sampling.min_p),
                            "--max-prompt-tokens": PromptSettings.max_prompt_tokens},
                "generate": {"--max-attempts": WorkerConfig.max_attempts,
                             "--request-timeout": WorkerConfig.request_timeout,
                             "--eject-after": WorkerConfig.eject_after}}
    for command, defaults in expected.items():
        text = " ".join(commands()[command].format_help().split())
        text = text[text.index("options:"):]
        for flag, default in defaults.items():
            name = flag[2:].upper().replace("-", "_")
            section = text[text.index(f"{flag} {name} "):]
            env = f"EAGLEFEED_{command.upper()}_{name}"
            assert (f"(default: {default}; env {env})" in section[:300]
                    or f"(default: {default}) (env {env})" in section[:300]), flag


@pytest.mark.parametrize(("argv", "name", "text", "reason"), [
    (["produce", "x"], "EAGLEFEED_PRODUCE_TURNS", "every", "invalid choice"),
    (["produce", "x"], "EAGLEFEED_PRODUCE_SAMPLES", "0", "at least 1"),
    (["produce", "x"], "EAGLEFEED_PRODUCE_TEMPERATURE", "warm", "invalid float value"),
    (["generate"], "EAGLEFEED_GENERATE_CONCURRENCY", "lots", "expected 'auto' or a number"),
    (["generate"], "EAGLEFEED_GENERATE_EXACTLY_ONCE", "maybe", "1/true/yes/on"),
    (["sink", "--output", "o"], "EAGLEFEED_SSL_CHECK_HOSTNAME", "sometimes", "0/false/no/off"),
])
def test_a_bad_value_stops_with_one_line_naming_the_variable(argv, name, text, reason, monkeypatch, capsys):
    monkeypatch.setenv(name, text)
    with pytest.raises(SystemExit) as stopped:
        parse(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and reason in err and "usage" not in err


def test_a_bad_value_does_not_stop_other_commands_or_help(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_PRODUCE_TURNS", "every")
    assert parse(["sink", "--output", "o"]).output == Path("o")
    with pytest.raises(SystemExit) as helped:
        main(["produce", "--help"])
    assert helped.value.code == 0


def test_a_secret_is_never_echoed_in_an_error(monkeypatch, capsys):
    parser, action = find("generate", "api_key")
    action.type = int  # no secret has a type today; pretend one did and failed
    monkeypatch.setenv("EAGLEFEED_GENERATE_API_KEY", "sk-not-an-int")
    with pytest.raises(SystemExit):
        parser.parse_args([])
    err = capsys.readouterr().err
    assert "EAGLEFEED_GENERATE_API_KEY" in err and "sk-not-an-int" not in err


def test_older_stage_specific_names_still_work_with_a_warning_naming_the_new_one(monkeypatch, capsys):
    monkeypatch.setenv("EAGLEFEED_GENERATE_GROUP", "workers")
    monkeypatch.setenv("EAGLEFEED_SINK_GROUP", "sinks")
    monkeypatch.setenv("EAGLEFEED_SINK_INSTANCE_ID", "sink-0")
    monkeypatch.setenv("EAGLEFEED_BROKER_DIR", "/brokers/a")
    monkeypatch.setenv("EAGLEFEED_PRODUCER_STATE_DIR", "/state")
    monkeypatch.setenv("EAGLEFEED_SGLANG_URL", "http://only-generate-had-it")  # one command: still read
    assert parse(["generate"]).group_id == "workers"
    assert parse(["generate"]).sglang_urls == ["http://only-generate-had-it"]
    sink = parse(["sink", "--output", "o"])
    assert (sink.group_id, sink.group_instance_id) == ("sinks", "sink-0")
    assert parse(["broker", "status"]).data_dir == Path("/brokers/a")
    assert parse(["produce", "x"]).state_dir == "/state"
    err = capsys.readouterr().err
    for old, new in [("GENERATE_GROUP", "GENERATE_GROUP_ID"), ("SINK_GROUP", "SINK_GROUP_ID"),
                     ("SINK_INSTANCE_ID", "SINK_GROUP_INSTANCE_ID"), ("BROKER_DIR", "BROKER_DATA_DIR"),
                     ("PRODUCER_STATE_DIR", "PRODUCE_STATE_DIR"), ("SGLANG_URL", "GENERATE_SGLANG_URL")]:
        assert f"EAGLEFEED_{old} is deprecated: set EAGLEFEED_{new}" in err, old
    monkeypatch.setenv("EAGLEFEED_SINK_GROUP_ID", "new")  # the new name wins, and says nothing
    assert parse(["sink", "--output", "o"]).group_id == "new"
    assert "EAGLEFEED_SINK_GROUP is" not in capsys.readouterr().err


def test_no_setting_of_one_stage_reaches_another(monkeypatch, capsys):
    # issue 27: EAGLEFEED_GROUP_ID=shared put the worker and the sink in one group.
    monkeypatch.setenv("EAGLEFEED_GROUP_ID", "shared")
    monkeypatch.setenv("EAGLEFEED_PORT", "1234")
    monkeypatch.setenv("EAGLEFEED_OUTPUT", "/data/x")
    from eaglefeed.cli.generate import worker_config
    from eaglefeed.cli.sink import sink_config

    assert worker_config(parse(["generate"])).group_id == "eaglefeed-generate"
    assert sink_config(parse(["sink", "--output", "o"])).group_id == "eaglefeed-sink"
    assert parse(["broker", "status"]).port == 9092
    assert parse(["stub-sglang"]).port != 1234
    assert parse(["demo"]).output == Path("demo-data")
    err = capsys.readouterr().err
    assert ("EAGLEFEED_GROUP_ID is not read (several commands have the option); "
            "set EAGLEFEED_SINK_GROUP_ID") in err
    assert "set EAGLEFEED_GENERATE_GROUP_ID" in err and "set EAGLEFEED_STUB_SGLANG_PORT" in err
    monkeypatch.setenv("EAGLEFEED_SINK_GROUP_ID", "sinks")
    monkeypatch.setenv("EAGLEFEED_GENERATE_CONCURRENCY", "3")
    assert parse(["sink", "--output", "o"]).group_id == "sinks"
    assert worker_config(parse(["generate"])).group_id == "eaglefeed-generate"
    assert parse(["generate"]).concurrency == 3
    assert parse(["status"]).sink_group == "sinks"  # status observes the sink's own variable


def test_status_says_the_generic_group_variable_is_not_read(monkeypatch, capsys):
    monkeypatch.setenv("EAGLEFEED_GROUP_ID", "shared")
    monkeypatch.setenv("EAGLEFEED_SINK_GROUP_ID", "sinks")
    args = parse(["status"])
    assert args.generate_group != "shared" and args.sink_group == "sinks"
    (line,) = [w for w in capsys.readouterr().err.splitlines() if "EAGLEFEED_GROUP_ID" in w]
    assert line.endswith("is not read (several commands have the option); "
                         "set EAGLEFEED_STATUS_GENERATE_GROUP or EAGLEFEED_STATUS_CONVERSE_GROUP")


def test_every_variable_but_the_pipeline_wide_ones_belongs_to_one_command():
    from eaglefeed.cli._env_names import env_names

    readers: dict[str, set[str]] = {}
    for command, parser in commands().items():
        for action in options(parser):
            names = env_names(action)
            assert names is not None
            observed = names.old if command != "status" else ()  # status reads the stages' group names
            for name in (names.name, *observed):
                readers.setdefault(name, set()).add(command)
    shared = {n: c for n, c in readers.items() if len(c) > 1}
    assert set(shared) <= set(PIPELINE_WIDE_ENV), shared


def test_an_unknown_variable_is_a_warning_naming_the_closest_known_one(monkeypatch, capsys):
    monkeypatch.setenv("EAGLEFEED_BOOTSTRAP_SERVER", "kafka:9092")
    monkeypatch.setenv("EAGLEFEED_SINK_GROUPID", "x")
    monkeypatch.setenv("EAGLEFEED_SINK_CRASH_AT", "")  # empty: unset
    monkeypatch.setenv("EAGLEFEED_METRICS_HOST", "0.0.0.0")  # known, though no flag reads it
    assert parse(["sink", "--output", "o"]).bootstrap_servers == "127.0.0.1:9092"
    err = capsys.readouterr().err
    assert ("unknown variable EAGLEFEED_BOOTSTRAP_SERVER is ignored (did you mean "
            "EAGLEFEED_BOOTSTRAP_SERVERS?)") in err
    assert "EAGLEFEED_SINK_GROUPID is ignored (did you mean EAGLEFEED_SINK_GROUP_ID?)" in err
    assert err.count("warning") == 2
    with pytest.raises(SystemExit):
        parse(["sink", "--help"])
    assert "warning" not in capsys.readouterr().err  # help never depends on the environment


def test_the_demo_never_takes_the_real_dataset_from_the_environment(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_SINK_OUTPUT", "/data/real-dataset")
    assert parse(["sink"]).output == Path("/data/real-dataset")
    assert parse(["demo"]).output == Path("demo-data")


def test_repeated_flags_replace_the_environment_and_the_default(monkeypatch):
    assert parse(["generate"]).sglang_urls == ["http://127.0.0.1:30000"]
    assert parse(["generate", "--sglang-url", "http://a"]).sglang_urls == ["http://a"]
    monkeypatch.setenv("EAGLEFEED_GENERATE_SGLANG_URL", "http://e1, http://e2,")
    assert parse(["generate"]).sglang_urls == ["http://e1", "http://e2"]
    argv = ["generate", "--sglang-url", "http://a", "--sglang-url", "http://b"]
    assert parse(argv).sglang_urls == ["http://a", "http://b"]


def test_choices_from_the_environment_ignore_case(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_LOG_LEVEL", "debug")
    assert parse(["stub-sglang"]).log_level == "DEBUG"  # the stand-in spells its levels in capitals
    monkeypatch.setenv("EAGLEFEED_LOG_LEVEL", "WARNING")
    assert parse(["stats", "d"]).log_level == "warning"


def test_an_empty_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_GENERATE_CONCURRENCY", "")
    assert parse(["generate"]).concurrency is None  # the default: auto


def test_default_group_ids_follow_the_topic_prefix_and_an_explicit_one_wins():
    from eaglefeed.cli.generate import worker_config
    from eaglefeed.cli.sink import sink_config

    worker = worker_config(parse(["generate", "--topic-prefix", "blue"]))
    sink = sink_config(parse(["sink", "--output", "o", "--topic-prefix", "blue"]))
    assert (worker.group_id, sink.group_id) == ("blue-generate", "blue-sink")
    default = worker_config(parse(["generate"]))
    assert default.group_id == "eaglefeed-generate"  # the default prefix keeps the groups it always had
    explicit = parse(["generate", "--topic-prefix", "blue", "--group-id", "mine"])
    assert worker_config(explicit).group_id == "mine"


@pytest.mark.parametrize("command", ["produce", "converse"])
def test_a_prompt_cap_below_one_stops_at_the_command_line(command, capsys):
    # A cap of 0 would turn every prompt into a dead letter (produce) or end every conversation
    # as prompt_too_long (converse): a configuration mistake, not data.
    argv = [command, "in.jsonl"] if command == "produce" else [command]
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--max-prompt-tokens", "0"])
    assert "must be at least 1, not 0" in capsys.readouterr().err
