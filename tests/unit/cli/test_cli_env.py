"""Every option of every command can come from EAGLEFEED_<FLAG>; a flag wins; a bad value is one line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from eaglefeed.cli.main import build_parser, main
from eaglefeed.core.config import PromptSettings, SamplingDefaults, WorkerConfig

# The only options whose variable is not EAGLEFEED_<FLAG>: the demo replaces both folders, so
# they must not follow EAGLEFEED_OUTPUT, which names a real dataset.
RENAMED = {("demo", "--output"): "DEMO_OUTPUT", ("demo", "--work-dir"): "DEMO_WORK_DIR"}
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
    flag = next(o for o in action.option_strings if o.startswith("--"))
    return "EAGLEFEED_" + RENAMED.get((command, flag), flag[2:].upper().replace("-", "_"))


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
    monkeypatch.setenv("EAGLEFEED_API_KEY", "sk-secret-from-env")
    monkeypatch.setenv("EAGLEFEED_SASL_PASSWORD", "pw-secret-from-env")
    for command, parser in commands().items():
        text = " ".join(parser.format_help().split())
        for action in options(parser):
            assert variable(command, action) in text, (command, action.option_strings)
        assert "secret-from-env" not in text


def test_help_shows_the_config_defaults():
    sampling = SamplingDefaults()
    expected = {"produce": {"--max-new-tokens": sampling.max_new_tokens,
                            "--temperature": sampling.temperature, "--top-p": sampling.top_p,
                            "--min-p": sampling.min_p,
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
            assert f"(default: {default}; env EAGLEFEED_{name})" in section[:300], flag


@pytest.mark.parametrize(("argv", "name", "text", "reason"), [
    (["produce", "x"], "EAGLEFEED_TURNS", "every", "invalid choice"),
    (["produce", "x"], "EAGLEFEED_SAMPLES", "0", "at least 1"),
    (["produce", "x"], "EAGLEFEED_TEMPERATURE", "warm", "invalid float value"),
    (["generate"], "EAGLEFEED_CONCURRENCY", "lots", "invalid int value"),
    (["generate"], "EAGLEFEED_EXACTLY_ONCE", "maybe", "1/true/yes/on"),
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
    monkeypatch.setenv("EAGLEFEED_TURNS", "every")
    assert parse(["sink", "--output", "o"]).output == Path("o")
    with pytest.raises(SystemExit) as helped:
        main(["produce", "--help"])
    assert helped.value.code == 0


def test_a_secret_is_never_echoed_in_an_error(monkeypatch, capsys):
    parser, action = find("generate", "api_key")
    action.type = int  # no secret has a type today; pretend one did and failed
    monkeypatch.setenv("EAGLEFEED_API_KEY", "sk-not-an-int")
    with pytest.raises(SystemExit):
        parser.parse_args([])
    err = capsys.readouterr().err
    assert "EAGLEFEED_API_KEY" in err and "sk-not-an-int" not in err


def test_older_variable_names_still_work_and_win_over_the_generic_one(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_GROUP_ID", "generic")
    assert parse(["generate"]).group_id == "generic"
    monkeypatch.setenv("EAGLEFEED_GENERATE_GROUP", "workers")
    monkeypatch.setenv("EAGLEFEED_SINK_GROUP", "sinks")
    monkeypatch.setenv("EAGLEFEED_SINK_INSTANCE_ID", "sink-0")
    monkeypatch.setenv("EAGLEFEED_SINK_MAX_BUFFER_BYTES", "1024")
    monkeypatch.setenv("EAGLEFEED_BROKER_PORT", "19092")
    monkeypatch.setenv("EAGLEFEED_BROKER_DIR", "/brokers/a")
    monkeypatch.setenv("EAGLEFEED_PRODUCER_STATE_DIR", "/state")
    assert parse(["generate"]).group_id == "workers"
    sink = parse(["sink", "--output", "o"])
    assert (sink.group_id, sink.group_instance_id, sink.max_buffer_bytes) == ("sinks", "sink-0", 1024)
    assert parse(["sink", "--output", "o", "--session-timeout", "6"]).session_timeout == 6.0
    broker = parse(["broker", "status"])
    assert (broker.port, broker.data_dir) == (19092, Path("/brokers/a"))
    assert parse(["produce", "x"]).state_dir == "/state"
    status = parse(["status"])
    assert (status.generate_group, status.sink_group) == ("workers", "sinks")


def test_the_demo_never_takes_the_real_dataset_from_the_environment(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_OUTPUT", "/data/real-dataset")
    assert parse(["sink"]).output == Path("/data/real-dataset")
    assert parse(["demo"]).output == Path("demo-data")


def test_repeated_flags_replace_the_environment_and_the_default(monkeypatch):
    assert parse(["generate"]).sglang_urls == ["http://127.0.0.1:30000"]
    assert parse(["generate", "--sglang-url", "http://a"]).sglang_urls == ["http://a"]
    monkeypatch.setenv("EAGLEFEED_SGLANG_URL", "http://e1, http://e2,")
    assert parse(["generate"]).sglang_urls == ["http://e1", "http://e2"]
    argv = ["generate", "--sglang-url", "http://a", "--sglang-url", "http://b"]
    assert parse(argv).sglang_urls == ["http://a", "http://b"]


def test_choices_from_the_environment_ignore_case(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_LOG_LEVEL", "debug")
    assert parse(["stub-sglang"]).log_level == "DEBUG"  # the stand-in spells its levels in capitals
    monkeypatch.setenv("EAGLEFEED_LOG_LEVEL", "WARNING")
    assert parse(["stats", "d"]).log_level == "warning"


def test_an_empty_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("EAGLEFEED_CONCURRENCY", "")
    assert parse(["generate"]).concurrency == 256


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
