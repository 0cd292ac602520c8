"""The object store's client: boto3, configured from the usual AWS names, each failure one clear line.

Credentials, endpoint and region come from boto3's own chain (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``,
``AWS_DEFAULT_REGION``, ``~/.aws/config``), so a dataset in AWS, MinIO, R2 or a local s3proxy
is configured the way each documents. Request checksums are sent only when an operation requires
them: the newer SDK default (a CRC32 header on every put) is refused as "not implemented" by
several S3-compatible servers, and every file eaglefeed commits carries its own sha256.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ConfigError, StoreError
from eaglefeed.dataset.store.uri import StoreURI

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'eaglefeed[s3]'"


class ConditionFailedError(StoreError):
    """A conditional put found the key already there: another writer got there first."""


@dataclass(frozen=True)
class StoredObject:
    """One object of a dataset: its path in the dataset, size, time, ``sha256`` metadata (when read), ETag."""

    rel: str
    size: int
    modified: float
    sha256: str | None
    etag: str | None = None  # changes with every put of the key (what a reader re-reads a record by)


class ObjectStore:
    """The objects of one dataset home (``s3://bucket/prefix``).

    Args:
        uri: the dataset's home.
        client: a boto3 S3 client (made from the environment when None).
    """

    def __init__(self, uri: StoreURI, client: Any | None = None) -> None:
        self.uri = uri
        self._client = client if client is not None else make_client()

    def put_file(self, rel: str, path: Path, *, sha256: str | None = None) -> None:
        """Upload ``path`` as the dataset's file ``rel`` (a put is atomic: readers see all or nothing).

        Args:
            rel: the file's path in the dataset.
            path: the local file.
            sha256: the file's hex sha256, kept as the object's ``sha256`` metadata (what the
                sink checks a hidden-state file by); the body's MD5 is sent too, so the store
                refuses a body damaged on the way.
        """
        extra: dict[str, Any] = {}
        if sha256 is not None:
            md5 = hashlib.md5(usedforsecurity=False)
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    md5.update(chunk)
            extra = {"Metadata": {"sha256": sha256}, "ContentMD5": base64.b64encode(md5.digest()).decode()}
        with open(path, "rb") as fh:
            self._call("put", rel, self._client.put_object, Bucket=self.uri.bucket, Key=self.uri.key(rel),
                       Body=fh, **extra)

    def head(self, rel: str) -> StoredObject | None:
        """The object ``rel``'s size and ``sha256`` metadata, or None if there is none."""
        response = self._call("head", rel, self._client.head_object, Bucket=self.uri.bucket,
                              Key=self.uri.key(rel), missing_ok=True)
        if response is None:
            return None
        return StoredObject(rel, int(response["ContentLength"]), response["LastModified"].timestamp(),
                            response.get("Metadata", {}).get("sha256"))

    def listing(self, folder: str) -> Iterator[StoredObject]:
        """The objects under ``folder`` with their sizes and times (no metadata: a listing has none)."""
        for rel, item in self._pages(folder, None):
            yield StoredObject(rel, int(item["Size"]), item["LastModified"].timestamp(), None,
                               item.get("ETag"))

    def put_bytes(self, rel: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` as ``rel``; with ``if_absent``, only if no object is there yet.

        Raises:
            ConditionFailedError: ``if_absent`` and the store says the key exists (412). A store
                that does not honour conditional puts overwrites instead: callers must not rely
                on this alone.
        """
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_absent else {}
        self._call("put", rel, self._client.put_object, Bucket=self.uri.bucket, Key=self.uri.key(rel),
                   Body=data, **extra)

    def get_bytes(self, rel: str) -> bytes | None:
        """The object ``rel``'s bytes, or None if there is none."""
        response = self._call("get", rel, self._client.get_object, Bucket=self.uri.bucket,
                              Key=self.uri.key(rel), missing_ok=True)
        return None if response is None else bytes(response["Body"].read())

    def get_range(self, rel: str, first: int, last: int) -> bytes | None:
        """Bytes ``first..last`` (inclusive, as in HTTP) of ``rel``, fewer at its end; None if none."""
        response = self._call("get", rel, self._client.get_object, Bucket=self.uri.bucket,
                              Key=self.uri.key(rel), Range=f"bytes={first}-{last}", missing_ok=True)
        return None if response is None else bytes(response["Body"].read())

    def download(self, rel: str, dest: Path) -> bool:
        """Copy ``rel`` to ``dest`` (streamed into a temp file of this process, fsynced, renamed into place).

        Processes of one host may fetch the same file at once (trainer ranks, a sink and a
        reader): each writes a temp file of its own, and a ``dest`` already in place is kept.

        Returns:
            False if the store has no such object.
        """
        if dest.exists():
            return True
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.download")
        try:
            response = self._call("get", rel, self._client.get_object, Bucket=self.uri.bucket,
                                  Key=self.uri.key(rel), missing_ok=True)
            if response is None:
                return False
            with open(tmp, "wb") as fh:
                for chunk in response["Body"].iter_chunks(1 << 20):
                    fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def size(self, rel: str) -> int | None:
        """The object ``rel``'s size in bytes, or None if there is none."""
        response = self._call("head", rel, self._client.head_object, Bucket=self.uri.bucket,
                              Key=self.uri.key(rel), missing_ok=True)
        return None if response is None else int(response["ContentLength"])

    def delete(self, rel: str) -> None:
        """Delete ``rel`` (deleting a missing object is not an error)."""
        self._call("delete", rel, self._client.delete_object, Bucket=self.uri.bucket, Key=self.uri.key(rel))

    def paths(self, folder: str, *, start_after: str | None = None) -> Iterator[str]:
        """The dataset paths under ``folder`` (relative to the dataset), in key order.

        Args:
            folder: e.g. ``manifest``; only objects below it are listed (not its marker).
            start_after: list only paths sorting after this one (how a reader reads what is new).
        """
        for rel, _item in self._pages(folder, start_after):
            yield rel

    def _pages(self, folder: str, start_after: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
        base = self.uri.key(folder.strip("/")) + "/"
        strip = len(self.uri.key(""))
        kwargs: dict[str, Any] = {"Bucket": self.uri.bucket, "Prefix": base}
        if start_after is not None:
            kwargs["StartAfter"] = self.uri.key(start_after)
        while True:
            page = self._call("list", folder, self._client.list_objects_v2, **kwargs)
            for item in page.get("Contents", ()):
                key = item["Key"]
                if not key.endswith("/"):  # filesystem-backed servers list directory markers too
                    yield key[strip:], item
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def ensure_bucket(self) -> None:
        """Check that the bucket can be reached, creating it when it does not exist yet.

        Raises:
            StoreError: credentials refused, endpoint unreachable, or the bucket cannot be made.
        """
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.uri.bucket)
            return
        except ClientError as exc:
            if _code(exc) not in ("404", "NoSuchBucket", "NotFound"):
                raise self._error("reach", "", exc) from None
        except Exception as exc:  # noqa: BLE001 - connection errors: one line, below
            raise self._error("reach", "", exc) from None
        self._call("create", "", self._client.create_bucket, Bucket=self.uri.bucket)
        log.info("created bucket %s", self.uri.bucket)

    def _call(self, op: str, rel: str, fn: Any, *, missing_ok: bool = False, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        try:
            return fn(**kwargs)
        except ClientError as exc:
            code = _code(exc)
            if missing_ok and code in ("404", "NoSuchKey", "NotFound"):
                return None
            if code in ("412", "PreconditionFailed"):
                raise ConditionFailedError(f"{self.uri}/{rel}: already written by another writer") from None
            raise self._error(op, rel, exc) from None
        except Exception as exc:  # noqa: BLE001 - connection errors, timeouts: one line
            raise self._error(op, rel, exc) from None

    def _error(self, op: str, rel: str, exc: Exception) -> StoreError:
        where = f"{self.uri}/{rel}" if rel else str(self.uri)
        return StoreError(f"object store: {op} {where} failed: {_describe(exc)}")


def make_client() -> Any:
    """A boto3 S3 client from the environment (see the module docstring).

    Raises:
        ConfigError: boto3 is not installed.
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError(f"an s3:// dataset needs boto3: {INSTALL_HINT}") from None
    config = Config(request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                    retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60)
    # A session of its own: boto3's default one keeps the credentials it first resolved.
    return boto3.session.Session().client("s3", config=config)


def _code(exc: Any) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code", ""))


def _describe(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{error.get('Code')} ({status}): {error.get('Message', '')}".rstrip(": ")
    return f"{type(exc).__name__}: {exc}"
