"""A dataset's home: a local directory, or an S3-compatible object store through a local mirror.

:func:`open_dataset` turns what a user passes (``DIR`` or ``s3://bucket/prefix``) into the
directory every part of eaglefeed works on; for a store, that is its mirror in the cache dir,
brought up to date first (``eaglefeed.dataset.store.mirror`` says how commits reach the store).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from eaglefeed.core.errors import StoreError
from eaglefeed.dataset.store.client import ObjectStore
from eaglefeed.dataset.store.mirror import Mirror, mirror_of
from eaglefeed.dataset.store.uri import StoreURI, is_remote, location, parse

__all__ = ["Mirror", "ObjectStore", "StoreError", "StoreURI", "is_remote", "location", "mirror_of",
           "mirror_dir", "open_dataset", "parse"]


def mirror_dir(uri: StoreURI, cache_dir: Path | None = None) -> Path:
    """Where the mirror of ``uri`` lives: ``<cache>/datasets/<endpoint-hash>/<bucket>/<prefix>``.

    ``EAGLEFEED_MIRROR_DIR`` (or ``cache_dir``) replaces ``<cache>/datasets``.

    The endpoint is part of the path so that two stores with a bucket of the same name never
    share a mirror.
    """
    from eaglefeed.core import config

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "aws"
    tag = hashlib.sha256(endpoint.encode()).hexdigest()[:12]
    base = Path(cache_dir or config.env_default("MIRROR_DIR", None) or config.cache_dir() / "datasets")
    return base / tag / uri.bucket / (uri.prefix or "_")


def open_dataset(where: str | os.PathLike[str], *, cache_dir: Path | None = None, fetch: bool = True) -> Path:
    """The directory to work on for the dataset at ``where`` (a directory, or ``s3://...``).

    ``fetch`` False brings a mirror's manifest up to date but not its files (what ``status`` reads).

    Raises:
        ConfigError: a malformed URI, or boto3 missing.
        StoreError: the store cannot be reached.
    """
    if not is_remote(where):
        return Path(where)
    # Imported here: the manifest module imports this package's mirror, and sync imports the manifest.
    from eaglefeed.dataset.store.sync import open_mirror

    uri = parse(str(where))
    root = mirror_dir(uri, cache_dir)
    open_mirror(uri, root, fetch=fetch)
    return root
