"""Find tokenizer files on this host: a local directory, else the Hugging Face cache, never the network."""

from __future__ import annotations

from pathlib import Path


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
