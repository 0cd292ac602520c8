"""Sampling parameters and chat-template kwargs: per-file sidecars and layered overrides.

Precedence, lowest first: the command line, the input file's sidecar ``<file>.overrides.json``
(``{"sampling_params": {...}, "chat_template_kwargs": {...}}``), the row itself.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from eaglefeed.chat.sampling import check_sampling
from eaglefeed.core.errors import ConfigError, InputError

SIDECAR_SUFFIX = ".overrides.json"


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
