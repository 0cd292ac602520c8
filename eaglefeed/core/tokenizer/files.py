"""The one reader of tokenizer files: a directory or the Hugging Face cache on this host, never fetched."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_FILE = "tokenizer_config.json"
"""The file naming a tokenizer's special tokens (``eos_token``, ``added_tokens_decoder``) and ``auto_map``."""


def tokenizer_file(tokenizer_id: str, name: str = "tokenizer.json") -> Path | None:
    """The file ``name`` of ``tokenizer_id`` if it is on this host, else None.

    Args:
        tokenizer_id: a local tokenizer directory or a Hugging Face repo id (the producer's
            ``--tokenizer``, as records carry it).
        name: the file, e.g. ``tokenizer.json`` or ``tokenizer_config.json``.

    A directory is looked in alone; any other id is looked up in the Hugging Face cache only
    (what ``from_pretrained`` downloaded before), so this never fetches anything.
    """
    try:  # the id may come from a record: it may be no valid path at all (too long, NUL bytes ...)
        root = Path(tokenizer_id)
        if root.is_dir():
            return root / name if (root / name).is_file() else None
    except (OSError, ValueError):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(tokenizer_id, name)
    except (OSError, ValueError):  # not a valid repo id
        return None
    return Path(found) if isinstance(found, str) else None


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object a tokenizer file holds (``tokenizer.json``, ``tokenizer_config.json``).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not UTF-8 JSON, or holds no JSON object.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no JSON object")
    return data


def tokenizer_config(tokenizer_id: str) -> dict[str, Any]:
    """The ``tokenizer_config.json`` of ``tokenizer_id`` on this host; empty when it is missing or unreadable.

    Args:
        tokenizer_id: a local tokenizer directory or a Hugging Face repo id.
    """
    path = tokenizer_file(tokenizer_id, CONFIG_FILE)
    if path is None:
        return {}
    try:
        return read_json(path)
    except (OSError, ValueError):
        return {}


def special_token(config: Mapping[str, Any], key: str) -> str | None:
    """The spelling of the special token ``key`` (``eos_token``, ``bos_token``) a tokenizer config names.

    Args:
        config: a ``tokenizer_config.json`` as read by :func:`read_json`.
        key: the entry; its value is a string or an added-token object (``{"content": ...}``).

    Returns:
        The token's text, or None when the entry is missing or holds no string.
    """
    value = config.get(key)
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else None


def added_tokens(config: Mapping[str, Any]) -> dict[str, int]:
    """Token → id of the added tokens a tokenizer config lists (``{"id": {"content": ...}}``).

    Raises:
        KeyError: the config has no ``added_tokens_decoder`` (or an entry no ``content``).
        TypeError: (and ValueError) an entry is not shaped as an added token.
    """
    decoder = config["added_tokens_decoder"]
    return {tok["content"]: int(key) for key, tok in decoder.items()}
