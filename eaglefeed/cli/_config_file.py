"""``--config FILE``: every command's settings in one TOML file, a section per command.

```toml
[pipeline]                      # pipeline-wide settings, for every command that has them
bootstrap_servers = "kafka:9092"
topic_prefix = "qwen3"

[generate]
sglang_url = ["http://gpu1:30000", "http://gpu2:30000"]
concurrency = 128

[sink]
output = "data/qwen3"
```

A key is an option's long flag without the dashes (``group-id`` or ``group_id``); the
``[pipeline]`` section takes the settings every stage of one pipeline must agree on (those of
``EAGLEFEED_<FLAG>``: broker, topic prefix, connect timeout, SASL/TLS, cache dir, log level ...).
A command's own section wins over ``[pipeline]``; the environment wins over the file, and a flag
on the command line over both. Values are checked like the flag's own argument (an on/off flag
takes true/false, a repeatable one a list). An unknown section or key, or a value of the wrong
kind, stops the command with one line naming the file, the key and the closest known one.

The file is found before parsing (``--config FILE`` anywhere on the command line, else
``EAGLEFEED_CONFIG``), read once, and its values are attached to the parser's options
(:func:`config_value` is what ``eaglefeed.cli._parser`` asks).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from eaglefeed.cli._env_names import commands, env_names, flag_name, options
from eaglefeed.core.config import PIPELINE_WIDE_ENV, env_default

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI (a dependency on 3.10 only)
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

PIPELINE_SECTION = "pipeline"
CONFIG_FLAG = "--config"

_VALUES: weakref.WeakKeyDictionary[argparse.Action, tuple[str, Any]] = weakref.WeakKeyDictionary()


class ConfigFileError(ValueError):
    """The config file cannot be used; the message is the one line to show."""


def config_value(action: argparse.Action) -> tuple[str, Any] | None:
    """``(where, value)`` the config file gives ``action`` (``where``: file, section, key), or None."""
    return _VALUES.get(action)


def config_path(argv: Sequence[str]) -> Path | None:
    """The file of ``--config FILE`` (or ``--config=FILE``) in ``argv``, else of ``EAGLEFEED_CONFIG``."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == CONFIG_FLAG and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith(CONFIG_FLAG + "="):
            return Path(arg.split("=", 1)[1])
    named = env_default("CONFIG", None)
    return Path(named) if named else None


def add_config_flag(p: argparse.ArgumentParser, *, dest: str = "config") -> None:
    """``--config FILE`` on ``p`` (read before parsing; see the module doc).

    Args:
        p: the parser.
        dest: where the value goes (the top-level parser's differs from its commands', so that a
            command's default from ``EAGLEFEED_CONFIG`` does not replace the flag given before it).
    """
    p.add_argument(CONFIG_FLAG, type=Path, default=None, metavar="FILE", dest=dest,
                   help="TOML file of settings: a [pipeline] section for the pipeline-wide ones and a "
                        "section per command ([generate], [sink], ...); the environment and flags "
                        "override it (README: Configuration file)")


def load_config(parser: argparse.ArgumentParser, path: Path) -> None:
    """Read ``path`` and attach its values to the options of ``parser``'s commands.

    Raises:
        ConfigFileError: the file is unreadable, not TOML, or names an unknown section or key.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"config file {path} is not valid TOML: {exc}") from None
    by_command = {name or PIPELINE_SECTION: _by_key(sub) for name, sub in commands(parser)}
    pipeline_keys = _pipeline_keys(by_command)
    # [pipeline] first, so that a command's own section overrides it
    for section, table in sorted(data.items(), key=lambda item: item[0] != PIPELINE_SECTION):
        if not isinstance(table, dict):
            raise ConfigFileError(f"{path}: {section} = ... is outside a section: put it under "
                                  f"[{PIPELINE_SECTION}] or a command's section ([generate], [sink], ...)")
        command = section.replace("_", "-")
        if command not in by_command:
            hint = _closest(command, by_command, "[{}]")
            raise ConfigFileError(f"{path}: unknown section [{section}]{hint}")
        known = pipeline_keys if command == PIPELINE_SECTION else by_command[command]
        for key, value in table.items():
            name = _key_name(key)
            if name not in known:
                raise ConfigFileError(_unknown_key(path, section, key, known=known, by_command=by_command))
            _attach(by_command, command, name, (f"{path} [{section}] {key}", value))
    _attach_observed(by_command)


def _attach_observed(by_command: Mapping[str, Mapping[str, argparse.Action]]) -> None:
    """An observer's option takes the file's value of each stage option whose variable it also reads.

    ``status --output`` reads ``EAGLEFEED_SINK_OUTPUT``, so with no ``output`` of its own in
    ``[status]`` it takes ``[sink] output`` (and ``--generate-group`` ``[generate] group_id``).
    """
    by_variable = {names.name: action for actions in by_command.values() for action in actions.values()
                   if (names := env_names(action)) is not None}
    for actions in by_command.values():
        for action in actions.values():
            names = env_names(action)
            if names is None or action in _VALUES:
                continue
            stage = next((by_variable[n] for n in names.also if by_variable.get(n) in _VALUES), None)
            if stage is not None:
                _VALUES[action] = _VALUES[stage]


def _unknown_key(path: Path, section: str, key: str, *, known: set[str] | Mapping[str, argparse.Action],
                 by_command: Mapping[str, Mapping[str, argparse.Action]]) -> str:
    """The one line for a key its section does not take: the closest it does, and which sections have it."""
    name = _key_name(key)
    owners = [c for c, actions in by_command.items() if name in actions]
    put = "put it under " + " or ".join(f"[{c}]" for c in owners)
    if section == PIPELINE_SECTION and owners:  # a command's own setting in [pipeline]
        return f"{path}: [{section}] {key!r} is not a pipeline-wide setting: {put}"
    line = f"{path}: [{section}] unknown key {key!r}{_closest(name, known, repr, lower=True)}"
    commands = [c for c in owners if c != PIPELINE_SECTION]
    if commands:  # another command's setting: say whose
        line += f"; eaglefeed {' and '.join(commands)} ha{'s' if len(commands) == 1 else 've'} it: {put}"
    elif owners:
        line += f"; it is a pipeline-wide setting: {put}"
    return line


def _attach(by_command: Mapping[str, Mapping[str, argparse.Action]], command: str, name: str,
            found: tuple[str, Any]) -> None:
    """A command's own key sets its option; a [pipeline] key that of every command that has it."""
    if command != PIPELINE_SECTION:
        _VALUES[by_command[command][name]] = found
        return
    for actions in by_command.values():
        action = actions.get(name)
        if action is not None:
            _VALUES[action] = found


def _pipeline_keys(by_command: Mapping[str, Mapping[str, argparse.Action]]) -> set[str]:
    """The pipeline-wide settings some command has, and the top-level options (``log_level``)."""
    names = {name for actions in by_command.values() for name in actions if name in PIPELINE_WIDE_ENV}
    return names | set(by_command[PIPELINE_SECTION])


def _by_key(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag_name(a): a for a in options(parser) if flag_name(a) != "CONFIG"}


def _key_name(key: str) -> str:
    return key.strip().upper().replace("-", "_")


def _closest(name: str, known: Iterator[str] | Mapping[str, Any] | set[str], shape: Any, *,
             lower: bool = False) -> str:
    candidates = list(known)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not close:
        return ""
    shown = close[0].lower() if lower else close[0]
    text = shape.format(shown) if isinstance(shape, str) else shape(shown)
    return f" (did you mean {text}?)"
