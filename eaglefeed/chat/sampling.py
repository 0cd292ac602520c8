"""Per-row sampling parameters: which keys exist, their ranges, their validation, the model's defaults."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from eaglefeed.core.config import SamplingDefaults
from eaglefeed.core.errors import ConfigError, InputError
from eaglefeed.core.tokenizer import tokenizer_file

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


GENERATION_CONFIG = "generation_config.json"
# What a model's generation_config.json may recommend that a prompt carries: the keys SGLang
# (--sampling-defaults model) and vLLM (--generation-config auto) take from it as their defaults.
MODEL_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


@dataclass(frozen=True)
class ModelSampling:
    """The sampling parameters a model's ``generation_config.json`` recommends.

    Attributes:
        values: the keys of :data:`MODEL_SAMPLING_KEYS` the file sets, checked and normalized.
        source: the file read, or None when the tokenizer has none on this host.
    """

    values: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def describe(self, tokenizer: str) -> str:
        """Where the defaults came from, for the log."""
        if self.source is not None:
            return f"from {self.source}"
        hub = "" if Path(tokenizer).is_dir() else (
            " (for a hub id only the Hugging Face cache is read: `hf download "
            f"{tokenizer} {GENERATION_CONFIG}` puts it there)")
        return f"neutral: no {GENERATION_CONFIG} beside tokenizer {tokenizer!r}{hub}"


def model_sampling(tokenizer: str, *, given: Collection[str] = ()) -> ModelSampling:
    """The sampling defaults of ``tokenizer``'s model, from its ``generation_config.json``.

    The file is looked for where the tokenizer is (its directory, or the Hugging Face cache for a
    hub id; nothing is fetched). As SGLang and vLLM do, only the keys it sets count and
    ``do_sample`` is not read; a ``top_k`` of 0 (transformers: no top-k filter) becomes -1.

    Args:
        tokenizer: the producer's ``--tokenizer`` (a directory or a hub id).
        given: keys set on the command line: they win, so the file's values of them are not read.

    Raises:
        ConfigError: the file is not JSON, or a value it sets is out of range.
    """
    path = tokenizer_file(tokenizer, GENERATION_CONFIG)
    if path is None:
        return ModelSampling()
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object")
    found = {k: data[k] for k in MODEL_SAMPLING_KEYS if data.get(k) is not None and k not in given}
    top_k = found.get("top_k")
    if isinstance(top_k, float) and top_k.is_integer():
        found["top_k"] = top_k = int(top_k)
    if type(top_k) is int and top_k == 0:
        found["top_k"] = -1
    for name in ("temperature", "top_p", "min_p"):  # JSON may say 1 for 1.0
        if type(found.get(name)) is int:
            found[name] = float(found[name])
    try:
        values = check_sampling(found)
    except InputError as exc:
        raise ConfigError(f"{path}: {exc}; set it on the command line instead (--temperature, --top-p, "
                          "--top-k, --min-p)") from exc
    return ModelSampling(values=values, source=path)
