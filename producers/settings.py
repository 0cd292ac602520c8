"""Sampling parameters and chat-template kwargs: validation, per-file sidecars, layered overrides.

Precedence, lowest first: the command line, the input file's sidecar ``<file>.overrides.json``
(``{"sampling_params": {...}, "chat_template_kwargs": {...}}``), the row itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from eaglefeed.config import SamplingDefaults
from eaglefeed.errors import ConfigError, InputError

SIDECAR_SUFFIX = ".overrides.json"
INT32_MAX = 2**31 - 1
SEED_MAX = 2**63 - 1 - INT32_MAX  # the worker sends seed + sample index as a long

# name → (type, lowest, highest, lowest is exclusive), for each of SamplingDefaults but the stop ids
_SAMPLING_SPEC: dict[str, tuple[type, float, float, bool]] = {
    "max_new_tokens": (int, 1, INT32_MAX, False),
    "temperature": (float, 0.0, math.inf, False),
    "top_p": (float, 0.0, 1.0, True),
    "top_k": (int, -1, INT32_MAX, False),
    "min_p": (float, 0.0, 1.0, False),
    "seed": (int, 0, SEED_MAX, False),
}
SAMPLING_KEYS = frozenset(f.name for f in fields(SamplingDefaults))


@dataclass(frozen=True)
class FileOverrides:
    """Sampling parameters and template kwargs that apply to every row of one input file."""

    sampling: Mapping[str, Any] = field(default_factory=dict)
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def key(self) -> str:
        """A canonical text of both, used to cache merged settings."""
        return json.dumps([self.sampling, self.template_kwargs], sort_keys=True)


NO_OVERRIDES = FileOverrides()


def sidecar_names(path: Path) -> tuple[Path, Path]:
    """Where the overrides of input ``path`` may be: ``arr.overrides.json`` or ``arr.json.overrides.json``."""
    return path.with_name(path.stem + SIDECAR_SUFFIX), path.with_name(path.name + SIDECAR_SUFFIX)


def load_overrides(path: Path) -> FileOverrides:
    """The sidecar overrides of input file ``path`` (none when it has no sidecar).

    The sidecar of ``arr.json`` is ``arr.overrides.json`` (the name the README gives) or
    ``arr.json.overrides.json``.

    Raises:
        ConfigError: when the sidecar is not valid, or both names exist.
    """
    found = [name for name in sidecar_names(path) if name.is_file()]
    if not found:
        return NO_OVERRIDES
    if len(found) > 1:
        raise ConfigError(f"{path} has two overrides files, {found[0].name} and {found[1].name}: "
                          "keep one")
    sidecar = found[0]
    try:
        data = json.loads(sidecar.read_bytes())
        if not isinstance(data, dict) or set(data) - {"sampling_params", "chat_template_kwargs"}:
            raise InputError("wrong_type", "expected an object with 'sampling_params' and/or "
                                           "'chat_template_kwargs'")
        kwargs = data.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise InputError("wrong_type", "'chat_template_kwargs' must be an object")
        return FileOverrides(sampling=check_sampling(data.get("sampling_params") or {}),
                             template_kwargs=kwargs)
    except (OSError, ValueError, InputError) as exc:
        raise ConfigError(f"bad overrides file {sidecar}: {exc}") from exc


def check_sampling(values: object) -> dict[str, Any]:
    """Validate (possibly partial) sampling parameters and return them normalized.

    Raises:
        InputError: ``wrong_type`` for unknown keys or wrong types, ``invalid_value`` for values
            out of range.
    """
    if not isinstance(values, Mapping):
        raise InputError("wrong_type", "'sampling_params' must be an object")
    if unknown := set(values) - SAMPLING_KEYS:
        raise InputError("wrong_type", f"'sampling_params' has unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == "stop_token_ids":
            out[name] = _stop_ids(value)
            continue
        kind, low, high, exclusive = _SAMPLING_SPEC[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and not isinstance(value, int)):
            raise InputError("wrong_type",
                             f"sampling parameter {name} must be {kind.__name__}, not {value!r}")
        in_range = low < value <= high if exclusive else low <= value <= high
        if not in_range or (name == "top_k" and value == 0):  # top_k: -1 (all) or at least 1
            raise InputError("invalid_value", f"sampling parameter {name}={value!r} is out of range")
        out[name] = kind(value)
    return out


def merge_template_kwargs(*layers: Mapping[str, Any], reserved: Collection[str]) -> dict[str, Any]:
    """Merge template kwargs, later layers win.

    Raises:
        InputError: ``invalid_value`` when a key is one of ``apply_chat_template``'s own parameters
            (``tokenize``, ``max_length`` ...), which would change how we render, not the template.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    if clash := sorted(k for k in merged if k in reserved):
        raise InputError("invalid_value", f"chat_template_kwargs may not set {clash}")
    return merged


def _stop_ids(value: object) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise InputError("wrong_type", "stop_token_ids must be a list of integers")
    if not all(0 <= t <= INT32_MAX for t in value):
        raise InputError("invalid_value", "stop_token_ids must be token ids")
    return list(value)
