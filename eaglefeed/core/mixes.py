"""Per-row sampling mixes: ``--temperature-cycle`` and ``--template-kwargs-cycle``, parsed; each row's draw.

Syntax (a weight ``:W`` is a positive integer; an entry without one weighs 1):

- ``--temperature-cycle 0,0.6,1.0`` or ``0:2,0.6:1,1.0:1``: temperatures.
- ``--template-kwargs-cycle reasoning_effort=low:4,medium:4,high:2``: one key, its values
  (``true``/``false``/``null`` and numbers are read as JSON, anything else as a string); or a
  JSON list of objects, each optionally weighted as ``[object, W]``:
  ``'[{"enable_thinking": true}, [{"enable_thinking": false}, 3]]'``.

Each row draws one entry of each cycle from its *source identity* (its messages and tools, and
its id with ``--keep-duplicates``), not from its prompt id: template kwargs change the rendered
prompt and so the prompt id, which therefore cannot decide them. The draw is a hash, so a
rerun or a resume draws the same, the entries' shares approach their weights over many rows,
and the two cycles draw independently of each other.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import blake2b
from itertools import accumulate
from typing import Any

from eaglefeed.core.errors import ConfigError

TEMPERATURE_FLAG = "--temperature-cycle"
TEMPLATE_KWARGS_FLAG = "--template-kwargs-cycle"
MAX_WEIGHT = 1_000_000  # a weight is a share, not a count of rows: anything larger is a typo
_WEIGHT = re.compile(r"[0-9]{1,7}")  # ASCII digits only (str.isdigit takes "²", which int() refuses)


@dataclass(frozen=True)
class SamplingMix:
    """The run's cycles, as (value, weight) entries; empty tuples mean no cycle.

    Attributes:
        temperatures: ``--temperature-cycle``.
        template_kwargs: ``--template-kwargs-cycle``; each entry is merged over
            ``--chat-template-kwargs`` (an overrides file and the row itself still win).
    """

    temperatures: tuple[tuple[float, int], ...] = ()
    template_kwargs: tuple[tuple[Mapping[str, Any], int], ...] = ()

    @property
    def active(self) -> bool:
        """Whether either cycle is set."""
        return bool(self.temperatures or self.template_kwargs)

    def draw(self, identity: str) -> tuple[int | None, int | None]:
        """The entries (indices) the row of this source identity uses: (temperature, template kwargs).

        None where that cycle is not set. Each cycle hashes the identity with its own salt, so a
        row's temperature says nothing about its template kwargs.
        """
        return (_draw(identity, "temperature", self.temperatures),
                _draw(identity, "template_kwargs", self.template_kwargs))

    def as_key(self) -> dict[str, Any]:
        """The cycles as JSON-ready data (the progress ledger is keyed by them)."""
        return {"temperature_cycle": [list(e) for e in self.temperatures],
                "template_kwargs_cycle": [[dict(kw), w] for kw, w in self.template_kwargs]}

    def describe(self) -> str:
        """One line for the start-up log ("" without a cycle)."""
        parts = []
        if self.temperatures:
            parts.append("temperature " + ", ".join(f"{t}:{w}" for t, w in self.temperatures))
        if self.template_kwargs:
            parts.append("template kwargs " + ", ".join(
                f"{json.dumps(dict(kw), sort_keys=True)}:{w}" for kw, w in self.template_kwargs))
        if not parts:
            return ""
        return ("sampling mix (each row draws from its messages and tools, so a rerun draws the same; "
                "every sample and turn of a row keeps its draw): " + "; ".join(parts))


def parse_temperature_cycle(text: str) -> tuple[tuple[float, int], ...]:
    """Read ``--temperature-cycle``: ``T[:W],T[:W],...``.

    Raises:
        ConfigError: one line naming the flag, for an empty, unreadable, negative, non-finite or
            repeated temperature, or a bad weight.
    """
    entries: list[tuple[float, int]] = []
    for n, raw in enumerate(text.split(","), 1):
        value, weight = _split_weight(raw.strip(), TEMPERATURE_FLAG, n, text)
        try:
            temperature = float(value)
        except ValueError:
            raise _bad(TEMPERATURE_FLAG, text, f"entry {n} ({raw.strip()!r}) is not a number") from None
        if not math.isfinite(temperature) or temperature < 0:
            raise _bad(TEMPERATURE_FLAG, text, f"entry {n} ({raw.strip()!r}) must be a finite number >= 0")
        entries.append((temperature, weight))
    _no_repeats([repr(t) for t, _ in entries], TEMPERATURE_FLAG, text)
    return tuple(entries)


def parse_template_kwargs_cycle(text: str) -> tuple[tuple[Mapping[str, Any], int], ...]:
    """Read ``--template-kwargs-cycle``: ``KEY=V[:W],V[:W],...`` or a JSON list of objects / ``[object, W]``.

    Raises:
        ConfigError: one line naming the flag, for text in neither form, an entry that is not an
            object, an empty or repeated entry, or a bad weight.
    """
    stripped = text.strip()
    entries = _json_cycle(stripped) if stripped.startswith("[") else _key_cycle(stripped)
    _no_repeats([json.dumps(kw, sort_keys=True) for kw, _ in entries], TEMPLATE_KWARGS_FLAG, text)
    return tuple(entries)


def _draw(identity: str, axis: str, entries: tuple[tuple[Any, int], ...]) -> int | None:
    if not entries:
        return None
    # surrogatepass: a row with a lone surrogate still draws; its prompt id then rejects it properly
    data = f"{axis}\x00{identity}".encode("utf-8", "surrogatepass")
    bounds = list(accumulate(w for _, w in entries))
    slot = int.from_bytes(blake2b(data, digest_size=8).digest(), "little") % bounds[-1]
    return bisect_right(bounds, slot)


def _json_cycle(text: str) -> list[tuple[dict[str, Any], int]]:
    flag = TEMPLATE_KWARGS_FLAG
    try:
        items = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _bad(flag, text, f"not a JSON list ({exc})") from None
    if not isinstance(items, list) or not items:
        raise _bad(flag, text, "the JSON form must be a non-empty list of objects")
    entries = []
    for n, item in enumerate(items, 1):
        weight: object = 1
        if isinstance(item, list) and len(item) == 2:
            item, weight = item
        if not isinstance(item, dict):
            raise _bad(flag, text, f"entry {n} must be an object or [object, weight]")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise _bad(flag, text, f"entry {n}'s weight must be an integer from 1 to {MAX_WEIGHT}")
        entries.append((item, weight))
    return entries


def _key_cycle(text: str) -> list[tuple[dict[str, Any], int]]:
    flag = TEMPLATE_KWARGS_FLAG
    key, eq, values = text.partition("=")
    key = key.strip()
    if not eq or not key or not key.isidentifier():
        hint = ("; one object is --chat-template-kwargs, a cycle of them is a JSON list [{...}, {...}]"
                if text.startswith("{") else "")
        raise _bad(flag, text, "expected KEY=VALUE[:WEIGHT],... (e.g. reasoning_effort=low:4,medium:4,"
                               f"high:2) or a JSON list of objects{hint}")
    entries = []
    for n, raw in enumerate(values.split(","), 1):
        value, weight = _split_weight(raw.strip(), flag, n, text)
        entries.append(({key: _scalar(value)}, weight))
    return entries


def _scalar(value: str) -> Any:
    """A shorthand value: JSON true/false/null or a number when it reads as one, else the text itself."""
    try:  # NaN and Infinity are not JSON (Python's reader takes them): here they stay text
        parsed = json.loads(value, parse_constant=_not_json)
    except ValueError:
        return value
    return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _split_weight(entry: str, flag: str, n: int, text: str) -> tuple[str, int]:
    value, colon, weight = entry.rpartition(":")
    if not colon:
        value, weight = entry, "1"
    value = value.strip()
    if not value:
        raise _bad(flag, text, f"entry {n} is empty")
    weight = weight.strip()
    if not _WEIGHT.fullmatch(weight) or not 1 <= int(weight) <= MAX_WEIGHT:
        hint = (" (for values holding ':' or ',' use the JSON list form)"
                if flag == TEMPLATE_KWARGS_FLAG else "")
        raise _bad(flag, text, f"entry {n} ({entry!r}): the weight after ':' must be an integer from 1 "
                               f"to {MAX_WEIGHT}{hint}")
    return value, int(weight)


def _no_repeats(keys: list[str], flag: str, text: str) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise _bad(flag, text, f"{key} is listed twice: give it a weight instead (VALUE:2)")
        seen.add(key)


def _bad(flag: str, text: str, why: str) -> ConfigError:
    return ConfigError(f"{flag} {text!r}: {why}")
