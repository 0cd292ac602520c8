"""The argument parser of every command: each option can also come from ``EAGLEFEED_<FLAG>``.

The variable of ``--foo-bar`` of ``eaglefeed cmd`` is ``EAGLEFEED_CMD_FOO_BAR``, or
``EAGLEFEED_FOO_BAR`` for a pipeline-wide setting (``eaglefeed.cli._env_names`` says which, and
which older names still work). A command reads its variables when it is parsed, and converts and checks each
value like the flag's own argument: the same type and choices (a choice in any case); on/off flags
take 1/true/yes/on or 0/false/no/off; repeatable flags take a comma-separated list. A flag on the
command line wins. A bad value stops the command with one line that names the variable. Below
the environment comes the ``--config`` file (``eaglefeed.cli._config_file``), checked the same way. Secrets
(``--api-key``, ``--sasl-password``) are read the same way and never shown in ``--help``, which
lists every other option's default (the declared one, not the environment's) and its variable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from eaglefeed.cli._config_file import config_value
from eaglefeed.cli._env_names import env_names, not_read, read_also, use_env, warnings_for
from eaglefeed.core.config import ENV_PREFIX, env_lookup, parse_bool

__all__ = ["EnvArgumentParser", "EnvHelpFormatter", "env_value", "file_value", "is_secret", "not_read",
           "read_also", "use_env"]

SECRET_OPTIONS = frozenset({"--api-key", "--sasl-password"})

_UNSET = object()  # an off value for an on/off flag: leave the option at its default


class EnvArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose options default to their ``EAGLEFEED_*`` variables (see the module doc).

    Subcommand parsers made by ``add_subparsers().add_parser`` are of the same class.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "append", _ReplacingAppend)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse like ``ArgumentParser``, with values from the environment where no flag is given."""
        args = sys.argv[1:] if args is None else list(args)
        namespace = argparse.Namespace() if namespace is None else namespace
        relaxed = []
        if "-h" not in args and "--help" not in args:  # help never depends on the environment
            for action in self._actions:
                value = self._from_env(action)
                if value is _UNSET:  # the environment wins over the config file
                    value = self._from_config(action)
                if value is _UNSET:
                    continue
                if not hasattr(namespace, action.dest):
                    setattr(namespace, action.dest, value)
                if action.required:  # the variable supplies it
                    action.required = False
                    relaxed.append(action)
            for warning in warnings_for(self):
                sys.stderr.write(f"{self.prog}: warning: {warning}\n")
        try:
            return super().parse_known_args(args, namespace)
        finally:
            for action in relaxed:
                action.required = True

    def _from_env(self, action: argparse.Action) -> object:
        names = env_names(action)
        found = env_lookup(names.read) if names is not None else None
        if found is None:
            return _UNSET
        variable, raw = found
        try:
            return env_value(action, raw)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            shown = "(hidden)" if is_secret(action) else repr(raw)
            self.exit(2, f"{self.prog}: error: {variable}={shown}: {exc}\n")


    def _from_config(self, action: argparse.Action) -> object:
        found = config_value(action)
        if found is None:
            return _UNSET
        where, value = found
        try:
            return file_value(action, value)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            shown = "(hidden)" if is_secret(action) else repr(value)
            self.exit(2, f"{self.prog}: error: {where} = {shown}: {exc}\n")


def file_value(action: argparse.Action, value: object) -> object:
    """``value``, a TOML value of the config file, converted and checked as ``action``'s argument.

    Raises:
        ValueError: when it is not a valid value (the message says why).
        argparse.ArgumentTypeError: from the option's own type function.
    """
    if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
        if isinstance(value, str):
            value = parse_bool(value)
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        if action.nargs == 0:  # store_true and kin: true is as if the flag were given
            return action.const if value else _UNSET
        return value
    if _takes_list(action):
        items = value if isinstance(value, list) else [p for p in str(value).split(",") if p.strip()]
        converted = [_convert(action, _text(item).strip()) for item in items]
        if not converted:
            raise ValueError("expected a list of values")
        return _FromEnv(converted) if isinstance(action, argparse._AppendAction) else converted
    if isinstance(value, (list, dict)):
        raise ValueError("expected one value, not a list or table")
    return _convert(action, _text(value))


def _text(value: object) -> str:
    if isinstance(value, (list, dict)):
        raise ValueError("expected a plain value")
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def env_value(action: argparse.Action, raw: str) -> object:
    """``raw``, the text of a variable, converted and checked as ``action``'s argument.

    Raises:
        ValueError: when the text is not a valid value (the message says why).
        argparse.ArgumentTypeError: from the option's own type function.
    """
    if isinstance(action, argparse.BooleanOptionalAction):
        return parse_bool(raw)
    if action.nargs == 0:  # store_true and kin: "on" is as if the flag were given
        return action.const if parse_bool(raw) else _UNSET
    if _takes_list(action):
        items = [_convert(action, part.strip()) for part in raw.split(",") if part.strip()]
        if not items:
            raise ValueError("expected a comma-separated list")
        return _FromEnv(items) if isinstance(action, argparse._AppendAction) else items
    return _convert(action, raw)


def is_secret(action: argparse.Action) -> bool:
    """Whether ``action`` takes a secret, whose value is never shown."""
    return any(option in SECRET_OPTIONS for option in action.option_strings)


class EnvHelpFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with its default and its variable."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        names = env_names(action)
        if names is None or text == argparse.SUPPRESS:
            return action.help
        notes = []
        if "default" not in text.lower() and _shows_default(action):
            notes.append("default: " + _default_text(action.default))
        notes.append("env " + ENV_PREFIX + names.name + _env_hint(action))
        return f"{text} ({'; '.join(notes)})".lstrip()

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap  # argparse's own, but never breaking a long variable name in two

        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width,
                             break_long_words=False, break_on_hyphens=False)


class _FromEnv(list[Any]):
    """A repeatable option's list that came from the environment (a flag replaces it)."""


class _ReplacingAppend(argparse._AppendAction):
    """``action="append"`` whose first flag replaces the default or the environment's list.

    argparse's own ``append`` adds the flags to a list default, so ``--sglang-url`` would not win.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest, None)
        if current is self.default or isinstance(current, _FromEnv):
            setattr(namespace, self.dest, [])
        super().__call__(parser, namespace, values, option_string)


def _convert(action: argparse.Action, text: str) -> object:
    kind = action.type
    value: object = text
    if callable(kind):
        try:
            value = kind(text)
        except argparse.ArgumentTypeError:
            raise
        except (TypeError, ValueError):
            raise ValueError(f"invalid {getattr(kind, '__name__', 'value')} value") from None
    if action.choices is None or value in action.choices:
        return value
    matches = [c for c in action.choices if isinstance(c, str) and c.lower() == str(value).lower()]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(f"invalid choice (choose from {', '.join(map(str, action.choices))})")


def _shows_default(action: argparse.Action) -> bool:
    return action.default is not None and action.default is not argparse.SUPPRESS and not is_secret(action)


def _default_text(default: object) -> str:
    if default == "":
        return "none"
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)).replace("%", "%%")
    return "%(default)s"


def _env_hint(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "=true|false"
    if _takes_list(action):
        return ", comma-separated"
    return ""


def _takes_list(action: argparse.Action) -> bool:
    repeated = isinstance(action, argparse._AppendAction)
    return repeated or action.nargs in ("+", "*") or isinstance(action.nargs, int)
