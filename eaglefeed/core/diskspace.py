"""A full disk as one clear line: which path, how much space is left, what was kept.

A stage that meets ``ENOSPC`` (or a quota, ``EDQUOT``) cannot go on, and nothing is gained by a
traceback: the operator needs the folder, the space left, and the assurance that nothing past
what is durable was committed (the sink's offsets follow its manifest; the producer's ledger
only moves past rows Kafka acknowledged).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from eaglefeed.core.errors import DiskFullError

FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is an out-of-space error."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in FULL:
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def disk_full(path: Path, kept: str) -> DiskFullError:
    """The error for a full disk under ``path``: ``kept`` says what is durable and how to go on."""
    try:
        free = f"{shutil.disk_usage(path).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(f"no space left on the disk under {path} ({free}); {kept}")
