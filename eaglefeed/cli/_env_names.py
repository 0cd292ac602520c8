"""Which ``EAGLEFEED_*`` variables each option reads, and the start-up warnings about the others.

The scheme: a pipeline-wide setting (``eaglefeed.core.config.PIPELINE_WIDE_ENV``: bootstrap
servers, topic prefix, connect timeout, SASL/TLS, cache dir, log level) has one name for every
command, ``EAGLEFEED_<FLAG>``; every other option is its command's own,
``EAGLEFEED_<COMMAND>_<FLAG>`` (``EAGLEFEED_SINK_GROUP_ID``, ``EAGLEFEED_STUB_SGLANG_PORT``), so no
setting of one stage reaches another. Older names still work for a while, with a warning naming
the new one: the stage-specific ones an option declares (:func:`use_env`), and ``EAGLEFEED_<FLAG>``
when exactly one command has the flag. A generic ``EAGLEFEED_<FLAG>`` that several commands
have (``EAGLEFEED_GROUP_ID``, ``EAGLEFEED_PORT``) is read by none of them: each warns. A variable
no option knows is a warning naming the closest known one.
"""

from __future__ import annotations

import argparse
import difflib
import weakref
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from eaglefeed.core.config import ENV_PREFIX, OTHER_ENV, PIPELINE_WIDE_ENV, set_variables

_OLD: weakref.WeakKeyDictionary[argparse.Action, tuple[str, ...]] = weakref.WeakKeyDictionary()
_ALSO: weakref.WeakKeyDictionary[argparse.Action, tuple[str, ...]] = weakref.WeakKeyDictionary()
_NOT_READ: weakref.WeakKeyDictionary[argparse.Action, tuple[str, ...]] = weakref.WeakKeyDictionary()
_BOUND: weakref.WeakKeyDictionary[argparse.Action, EnvNames] = weakref.WeakKeyDictionary()
_KNOWN: weakref.WeakKeyDictionary[argparse.ArgumentParser, frozenset[str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class EnvNames:
    """The variables (without prefix) of one option.

    Attributes:
        name: its own variable, shown in ``--help``.
        also: other commands' variables it reads too, silently (``status`` reads the sink's group).
        old: older names it still reads, each with a warning naming ``name``.
        ignored: older names it no longer reads (several commands had them); a warning when set.
    """

    name: str
    also: tuple[str, ...] = ()
    old: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def read(self) -> tuple[str, ...]:
        """Every name read, in order of precedence."""
        return (self.name, *self.also, *self.old)


def use_env(action: argparse.Action, *old_names: str) -> argparse.Action:
    """Declare older stage-specific variable names ``action`` still reads (each with a warning).

    Args:
        action: what ``add_argument`` returned.
        old_names: variable names without the ``EAGLEFEED_`` prefix, most specific first.
    """
    _OLD[action] = old_names
    return action


def read_also(action: argparse.Action, *names: str) -> argparse.Action:
    """Let ``action`` also read these variables of other commands, silently (an observer's defaults).

    Args:
        action: what ``add_argument`` returned.
        names: variable names without the ``EAGLEFEED_`` prefix, in order of precedence.
    """
    _ALSO[action] = names
    return action


def not_read(action: argparse.Action, *names: str) -> argparse.Action:
    """Warn when these generic variables are set: a user may expect ``action`` to read them.

    ``status --generate-group`` reads the stages' own group variables, not ``EAGLEFEED_GROUP_ID``
    (which no command reads): set, it would otherwise be silently without effect.
    """
    _NOT_READ[action] = names
    return action


def env_names(action: argparse.Action) -> EnvNames | None:
    """The variables ``action`` reads; None for positionals, help and version.

    An option of a parser :func:`bind_environment` has not seen reads ``EAGLEFEED_<FLAG>``.
    """
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or not action.option_strings:
        return None
    return _BOUND.get(action) or EnvNames(flag_name(action))


def flag_name(action: argparse.Action) -> str:
    """``--foo-bar`` as ``FOO_BAR``."""
    flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
    return flag.lstrip("-").upper().replace("-", "_")


def bind_environment(parser: argparse.ArgumentParser) -> None:
    """Name the variables of every option of ``parser`` and its commands (see the module doc)."""
    by_name = dict(commands(parser))
    owners: defaultdict[str, set[str]] = defaultdict(set)
    for command, sub in by_name.items():
        for action in options(sub):
            owners[flag_name(action)].add(command)
    known = set(PIPELINE_WIDE_ENV) | set(OTHER_ENV)
    for command, sub in by_name.items():
        for action in options(sub):
            flag = flag_name(action)
            if flag in PIPELINE_WIDE_ENV or not command:
                names = EnvNames(flag)
            else:
                name = command.upper().replace("-", "_") + "_" + flag
                generic = (flag,) if flag != name and flag not in _OLD.get(action, ()) else ()
                unique = len(owners[flag]) == 1
                old = _OLD.get(action, ()) + (generic if unique else ())
                ignored = (() if unique else generic) + _NOT_READ.get(action, ())
                names = EnvNames(name, _ALSO.get(action, ()), old, ignored)
            _BOUND[action] = names
            known.update(names.read, names.ignored)
    _KNOWN[parser] = frozenset(known)


def warnings_for(parser: argparse.ArgumentParser) -> Iterator[str]:
    """What the environment gets wrong for ``parser``: unknown variables, older names, ignored names."""
    present = set(set_variables())
    known = _KNOWN.get(parser)
    if known is not None:
        for name in sorted(present - known):
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {ENV_PREFIX}{close[0]}?)" if close else ""
            yield f"unknown variable {ENV_PREFIX}{name} is ignored{hint}"
    instead: defaultdict[str, list[str]] = defaultdict(list)  # an ignored name → what to set
    for action in options(parser):
        names = env_names(action)
        if names is None or names.name in present:
            continue
        for old in names.ignored:
            if old in present and not any(n in present for n in names.also):
                instead[old].append(f"{ENV_PREFIX}{names.name}")
        used = next((n for n in (*names.also, *names.old) if n in present), None)
        if used in names.old:
            yield f"{ENV_PREFIX}{used} is deprecated: set {ENV_PREFIX}{names.name}"
    for old, wanted in instead.items():
        yield (f"{ENV_PREFIX}{old} is not read (several commands have the option); "
               f"set {' or '.join(wanted)}")


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``("", parser)``, then each command's name and parser."""
    yield "", parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of ``parser`` that take a setting (help and version left out)."""
    return [a for a in parser._actions if a.option_strings
            and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]
