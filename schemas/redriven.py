"""The markers on ``<prefix>.redriven``: which dead letters are resolved since, and how.

The topic is compacted, so only the newest marker of each key counts. Two kinds share it:
    re-drive: key ``<partition>@<offset>`` (the letter's position on the dead-letter topic), value
        ``{"redriven_at": ms, "to": topic}``; ``dead-letters --redrive`` writes it once the
        letter's original is acknowledged on ``to``.
    fix: key ``produce:<source>:<line>``, value ``{"fixed_at": ms, "prompt_id": id}``; ``produce``
        writes it once a prompt built from an input line it dead-lettered before is acknowledged.
        A produce letter's position is not known to the run that fixes its line (nor are the
        duplicates an interrupted run may have sent), so the marker names the line, and it
        resolves every produce letter of that line created before ``fixed_at`` (:func:`fixes`):
        a line that fails again after the fix gets a newer letter, which stays open.
Both times are in milliseconds of the writer's clock, as a letter's ``created_at`` is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""One marker per key is all that matters: compaction keeps the newest."""
FIX_PREFIX = "produce:"


def redrive_marker(position: str, *, to: str, at_ms: int) -> tuple[bytes, bytes]:
    """The (key, value) recording that the letter at ``position`` was re-driven to topic ``to``."""
    return position.encode(), json.dumps({"redriven_at": at_ms, "to": to}).encode()


def fix_key(source: str, line: int) -> str:
    """The key of the fix marker of input ``line`` of ``source`` (as the dead letter records them)."""
    return f"{FIX_PREFIX}{source}:{line}"


def fix_marker(source: str, line: int, *, prompt_id: str, at_ms: int) -> tuple[bytes, bytes]:
    """The (key, value) recording that ``line`` of ``source`` was published as ``prompt_id`` at ``at_ms``."""
    return (fix_key(source, line).encode(),
            json.dumps({"fixed_at": at_ms, "prompt_id": prompt_id}).encode())


def fixes(marker: Mapping[str, Any] | None, *, created_at: int) -> bool:
    """Whether fix ``marker`` resolves a produce letter of its line created at ``created_at`` (ms).

    Only a fix after the letter does: a letter written after it is a new failure of the line.
    """
    return marker is not None and isinstance(marker.get("fixed_at"), int) and marker["fixed_at"] > created_at
