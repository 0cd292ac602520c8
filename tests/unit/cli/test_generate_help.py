"""``generate --help`` in argument groups: everyday flags first, then tuning, then expert (issue 36);
grouping moves no flag's name, default or variable."""

from __future__ import annotations

import argparse

from eaglefeed.cli._env_names import env_names
from eaglefeed.cli.main import build_parser

EVERYDAY = ["--sglang-url", "--engine", "--api-key", "--concurrency", "--group-id", "--hidden-states",
            "--hidden-states-dir", "--hidden-states-dtype", "--hidden-states-wait", "--hidden-states-budget",
            "--exit-when-idle",
            "--bootstrap-servers", "--topic-prefix", "--connect-timeout"]
EXPERT = ["--generation-schema-version", "--exactly-once", "--transaction-deadline", "--session-timeout",
          "--settle-seconds", "--stall-seconds"]


def generate() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["generate"]


def groups(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {g.title or "": [next(o for o in a.option_strings if o.startswith("--"))
                            for a in g._group_actions if a.option_strings]
            for g in parser._action_groups}


def test_the_everyday_flags_come_first_then_tuning_then_expert():
    found = groups(generate())
    titles = [t for t, flags in found.items() if flags and t != "options"]
    assert [t.split(":")[0] for t in titles[:3]] == ["everyday", "tuning", "expert"], titles
    everyday, tuning, expert = (found[t] for t in titles[:3])
    assert everyday == EVERYDAY
    assert set(EXPERT) <= set(expert)
    assert {"--request-timeout", "--max-attempts", "--vocab-size", "--samples-mode"} <= set(tuning)
    assert found["options"] == ["--help", "--config"]  # nothing left ungrouped


def test_the_help_lists_the_groups_in_that_order():
    text = generate().format_help()
    text = text[text.index("\noptions:"):]  # after the usage lines, which name every flag
    titles = ("everyday", "tuning", "expert", "Kafka security (SASL/TLS)")
    at = [text.index(f"\n{title}:") for title in titles]
    assert at == sorted(at)
    assert at[0] < text.index("--sglang-url") < at[1] < text.index("--max-attempts") < at[2]
    assert at[2] < text.index("--exactly-once") < at[3]


def test_grouping_keeps_every_flag_its_default_and_its_variables():
    flags = {a.option_strings[0]: (a.dest, a.default, env_names(a)) for a in generate()._actions
             if a.option_strings and a.dest != "help"}
    assert len(flags) == 47  # 45, --hidden-states-spool and --hidden-states-budget (issue 35)
    assert flags["--group-id"][2] is not None and "GENERATE_GROUP" in repr(flags["--group-id"][2])
    assert flags["--sglang-url"][1] == ["http://127.0.0.1:30000"]
