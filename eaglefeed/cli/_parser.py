"""The argument parser of every command: each option can also come from ``EAGLEFEED_<FLAG>``.

The variable of ``--foo-bar`` is ``EAGLEFEED_FOO_BAR``; a few options name theirs with
:func:`use_env`. A command reads its variables when it is parsed, and converts and checks each
value like the flag's own argument: the same type and choices (a choice in any case); on/off flags
take 1/true/yes/on or 0/false/no/off; repeatable flags take a comma-separated list. A flag on the
command line wins. A bad value stops the command with one line that names the variable. Secrets
(``--api-key``, ``--sasl-password``) are read the same way and never shown in ``--help``, which
lists every other option's default (the declared one, not the environment's) and its variable.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from eaglefeed.core.config import ENV_PREFIX, env_lookup, parse_bool

SECRET_OPTIONS = frozenset({"--api-key", "--sasl-password"})

_NAMES: weakref.WeakKeyDictionary[argparse.Action, tuple[str, ...]] = weakref.WeakKeyDictionary()
_UNSET = object()  # an off value for an on/off flag: leave the option at its default


def use_env(action: argparse.Action, *names: str) -> argparse.Action:
    """Read ``action`` from these variables instead of the one its flag names; the first one set wins.

    Args:
        action: what ``add_argument`` returned.
        names: variable names without the ``EAGLEFEED_`` prefix, most specific first.
    """
    _NAMES[action] = names
    return action


def env_names(action: argparse.Action) -> tuple[str, ...]:
    """The variables (without prefix) ``action`` is read from; none for positionals, help and version."""
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or not action.option_strings:
        return ()
    if action in _NAMES:
        return _NAMES[action]
    flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
    return (flag.lstrip("-").upper().replace("-", "_"),)


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
                if value is _UNSET:
                    continue
                if not hasattr(namespace, action.dest):
                    setattr(namespace, action.dest, value)
                if action.required:  # the variable supplies it
                    action.required = False
                    relaxed.append(action)
        try:
            return super().parse_known_args(args, namespace)
        finally:
            for action in relaxed:
                action.required = True

    def _from_env(self, action: argparse.Action) -> object:
        found = env_lookup(env_names(action))
        if found is None:
            return _UNSET
        variable, raw = found
        try:
            return env_value(action, raw)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            shown = "(hidden)" if is_secret(action) else repr(raw)
            self.exit(2, f"{self.prog}: error: {variable}={shown}: {exc}\n")


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
        if not names or text == argparse.SUPPRESS:
            return action.help
        notes = []
        if "default" not in text.lower() and _shows_default(action):
            notes.append("default: " + _default_text(action.default))
        notes.append("env " + " or ".join(ENV_PREFIX + name for name in names) + _env_hint(action))
        return f"{text} ({'; '.join(notes)})".lstrip()


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
