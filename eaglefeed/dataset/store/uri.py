"""Where a dataset lives: a local directory, or ``s3://bucket/prefix`` in an S3-compatible store."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eaglefeed.core.errors import ConfigError

SCHEME = "s3://"


@dataclass(frozen=True)
class StoreURI:
    """A dataset's home in an object store: every key of the dataset starts with ``prefix``.

    Attributes:
        bucket: the bucket name.
        prefix: the key prefix without leading or trailing ``/`` (may be empty: the whole bucket).
    """

    bucket: str
    prefix: str

    def key(self, rel: str) -> str:
        """The object key of the dataset's file ``rel`` (a path relative to the dataset)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def is_remote(location: str | os.PathLike[str]) -> bool:
    """True if ``location`` names an object store (``s3://...``) rather than a directory."""
    return isinstance(location, str) and location.startswith(SCHEME)


def parse(where: str) -> StoreURI:
    """Parse ``s3://bucket[/prefix]``.

    Raises:
        ConfigError: the bucket is missing or not a valid S3 bucket name.
    """
    rest = where[len(SCHEME):]
    bucket, _, prefix = rest.partition("/")
    if not 3 <= len(bucket) <= 63 or not all(c.islower() or c.isdigit() or c in ".-" for c in bucket):
        raise ConfigError(f"{where}: {bucket!r} is not a bucket name (3-63 characters of a-z, 0-9, '.', '-')")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise ConfigError(f"{where}: the prefix may not hold empty, '.' or '..' parts")
    return StoreURI(bucket, prefix)


def location(value: str) -> str | Path:
    """The argparse type of a dataset argument: ``s3://...`` stays a string, anything else is a Path."""
    if is_remote(value):
        parse(value)  # a malformed URI is a usage error, said before anything starts
        return value
    return Path(value)
