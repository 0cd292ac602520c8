"""Which model a prompt is for, and whether a server's model is that one.

A prompt names its model as the producer knows it (``produce --model``, else a hub id such as
``Qwen/Qwen3-8B`` or a model directory), a server as it loaded it (SGLang's ``model_path``,
vLLM's ``root``): often a local path such as ``/models/Qwen3-8B``. Two names are the same model
when their last path components are, case aside; a snapshot of the Hugging Face cache
(``.../models--Qwen--Qwen3-8B/snapshots/<sha>``) is named by its repo. An empty name is an
unknown model, and matches any.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

_CACHE_REPO = "models--"  # the Hugging Face cache's folder of a model repo: models--<org>--<name>
_MODEL_CONFIG = "config.json"  # beside a tokenizer, it makes the directory a model's


def model_name(model: str) -> str:
    """What ``model`` is compared by: ``qwen3-8b`` for ``Qwen/Qwen3-8B`` and ``/models/Qwen3-8B/``."""
    parts = PurePosixPath(model.replace("\\", "/").rstrip("/")).parts
    for part in reversed(parts):
        if part.startswith(_CACHE_REPO) and "--" in part[len(_CACHE_REPO):]:
            return part.rpartition("--")[2].lower()
    return parts[-1].lower() if parts else ""


def same_model(ours: str | None, theirs: str | None) -> bool:
    """Whether ``ours`` and ``theirs`` name one model; an unknown (empty or None) one matches any."""
    if not ours or not theirs:
        return True
    return model_name(ours) == model_name(theirs)


def tokenizer_model(tokenizer: str) -> str | None:
    """The model a tokenizer reference names, when it names one (None: it does not say).

    A hub id is the model's repo (the tokenizer of ``Qwen/Qwen3-8B`` comes with that model); a
    local directory is a model's when its ``config.json`` lies beside the tokenizer, and its
    path names it. A directory of a tokenizer alone names no model. ``_name_or_path`` in that
    config is not read: a fine-tune keeps its base model's name there.
    """
    path = Path(tokenizer)
    try:
        if path.is_dir():
            return str(path) if (path / _MODEL_CONFIG).is_file() else None
    except (OSError, ValueError):
        return None
    if path.is_absolute() or tokenizer.startswith("."):
        return None  # a path that is not there, not a hub id
    return tokenizer or None
