"""Per-row sampling parameters: which keys exist, their ranges, and their validation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from eaglefeed.core.config import SamplingDefaults
from eaglefeed.core.errors import InputError

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


def _stop_ids(value: object) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise InputError("wrong_type", "stop_token_ids must be a list of integers")
    if not all(0 <= t <= INT32_MAX for t in value):
        raise InputError("invalid_value", "stop_token_ids must be token ids")
    return list(value)
