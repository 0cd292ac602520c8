"""An in-memory stand-in for the boto3 S3 client calls ``ObjectStore`` makes, for unit tests of logic.

Integration tests use a real S3-compatible server (s3proxy, ``tests/conftest.py``); this fake
lets unit tests drive the worker's store paths (``tests/unit/consumers/generate/test_worker_capture.py``).
Missing keys raise botocore's ``ClientError`` with the codes a real store sends.
"""

from __future__ import annotations

import datetime
import io
import threading
from typing import Any

from botocore.exceptions import ClientError


class _Body(io.BytesIO):
    def iter_chunks(self, size: int) -> Any:
        return iter(lambda: self.read(size), b"")


class FakeS3:
    """Objects by (bucket, key): body and metadata. Thread-safe (the worker calls it from threads)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], tuple[bytes, dict[str, str]]] = {}
        self.buckets: set[str] = set()
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def put(self, bucket: str, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Put an object as another writer would (a server's connector)."""
        with self._lock:
            self.buckets.add(bucket)
            self.objects[(bucket, key)] = (data, dict(metadata or {}))

    def keys(self, bucket: str) -> list[str]:
        with self._lock:
            return sorted(k for b, k in self.objects if b == bucket)

    def head_bucket(self, Bucket: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        if Bucket not in self.buckets:
            raise _missing("head_bucket", "404")
        return {}

    def create_bucket(self, Bucket: str) -> dict[str, Any]:  # noqa: N803
        self.buckets.add(Bucket)
        return {}

    def put_object(self, Bucket: str, Key: str, Body: Any, Metadata: dict[str, str] | None = None,  # noqa: N803
                   **_: Any) -> dict[str, Any]:
        data = Body if isinstance(Body, bytes) else Body.read()
        self.calls.append(f"put {Key}")
        self.put(Bucket, Key, data, Metadata)
        return {}

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        self.calls.append(f"head {Key}")
        data, meta = self._get(Bucket, Key, "head_object")
        return {"ContentLength": len(data), "LastModified": _NOW, "Metadata": meta}

    def get_object(self, Bucket: str, Key: str, Range: str | None = None) -> dict[str, Any]:  # noqa: N803
        self.calls.append(f"get {Key} {Range or ''}".rstrip())
        data, meta = self._get(Bucket, Key, "get_object")
        if Range is not None:
            first, _, last = Range.removeprefix("bytes=").partition("-")
            data = data[int(first):int(last) + 1]
        return {"Body": _Body(data), "ContentLength": len(data), "Metadata": meta}

    def delete_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        self.calls.append(f"delete {Key}")
        with self._lock:
            self.objects.pop((Bucket, Key), None)
        return {}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", StartAfter: str = "", **_: Any  # noqa: N803
                        ) -> dict[str, Any]:
        with self._lock:
            items = sorted((k, len(v[0])) for (b, k), v in self.objects.items()
                           if b == Bucket and k.startswith(Prefix) and k > StartAfter)
        return {"Contents": [{"Key": k, "Size": n, "LastModified": _NOW, "ETag": f'"{n}"'} for k, n in items],
                "IsTruncated": False}

    def _get(self, bucket: str, key: str, op: str) -> tuple[bytes, dict[str, str]]:
        with self._lock:
            found = self.objects.get((bucket, key))
        if found is None:
            raise _missing(op, "NoSuchKey" if op == "get_object" else "404")
        return found


_NOW = datetime.datetime(2026, 12, 6, tzinfo=datetime.timezone.utc)


def _missing(op: str, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "Not Found"},
                        "ResponseMetadata": {"HTTPStatusCode": 404}}, op)
