"""The released versions of each record schema, kept as ``history/<record>/v<N>.avsc``.

The newest file of a record is its current schema. A process built to write version N reads
versions 1..N (it cannot know a later one): ``codec_for`` builds that codec. The compatibility
rule every new version must follow is checked by ``eaglefeed.schemas.compat`` (see docs/SCHEMAS.md).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from importlib.abc import Traversable
from typing import Any

from eaglefeed.schemas.codec import AvroCodec

RECORDS = ("prompt", "generation", "dead_letter", "conversation_event", "worker_status", "sink_status")
_VERSION = re.compile(r"v(\d+)\.avsc")


def history(record: str) -> list[dict[str, Any]]:
    """Every released version of ``record``'s schema, oldest first (index 0 is v1).

    Raises:
        ValueError: ``record`` has no history, or its versions are not numbered 1..N.
    """
    return load_history(resources.files("eaglefeed.schemas").joinpath("history").joinpath(record), record)


def load_history(folder: Traversable, record: str = "") -> list[dict[str, Any]]:
    """The ``v<N>.avsc`` files of ``folder``, oldest first (see :func:`history`).

    Raises:
        ValueError: the versions are not numbered 1..N.
    """
    found = {}
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _VERSION.fullmatch(entry.name)
            if match:
                found[int(match.group(1))] = json.loads(entry.read_text(encoding="utf-8"))
    if sorted(found) != list(range(1, len(found) + 1)) or not found:
        raise ValueError(f"schema history of {record!r} must be v1..vN, found {sorted(found)}")
    return [found[n] for n in sorted(found)]


def current_version(record: str) -> int:
    """The newest released version number of ``record``."""
    return len(history(record))


def codec_for(record: str, version: int | None = None) -> AvroCodec:
    """A codec that writes ``version`` (default: the newest) and reads every version up to it.

    Raises:
        ValueError: no such record or version.
    """
    versions = history(record)
    version = len(versions) if version is None else version
    if not 1 <= version <= len(versions):
        raise ValueError(f"{record} has versions 1..{len(versions)}, not {version}")
    return AvroCodec(versions[version - 1], older_schemas=tuple(versions[:version - 1]))
