"""Which Kafka topic and consumer group own a dataset directory: a second owner is refused.

Two sinks of different groups on one ``--output`` would each write every record, and their
segments would overlap. The first sink to use a directory claims it in ``owner.json``; a sink of
another group or topic stops with one clear line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset.store.mirror import mirror_of

OWNER_FILE = "owner.json"


def claim_output(root: Path, *, topic: str, group_id: str) -> None:
    """Claim ``root`` for the sink of ``group_id`` on ``topic``, or check that it already owns it.

    The claim is atomic (a hard link of a fsynced temp file), so of two sinks starting together
    exactly one wins.

    Raises:
        ConfigError: when another topic or group owns ``root``, or it cannot be written.
    """
    wanted = {"topic": topic, "group_id": group_id}
    path = root / OWNER_FILE
    remote = mirror_of(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if remote is not None and not path.exists():  # a store's owner counts on every host
            remote.store.download(OWNER_FILE, path)
        if not path.exists():
            _create(path, wanted)
        if remote is not None and remote.store.head(OWNER_FILE) is None:  # also after a crash before the put
            remote.store.put_bytes(OWNER_FILE, path.read_bytes(), if_absent=True)
        owner = read_owner(root)
    except OSError as exc:
        raise ConfigError(f"cannot use {root} as the output: {exc.strerror or exc}") from None
    if owner is not None and {k: owner.get(k) for k in wanted} != wanted:
        raise ConfigError(f"{root} belongs to the sink of group {owner.get('group_id')!r} on topic "
                          f"{owner.get('topic')!r}; this sink (group {group_id!r}, topic {topic!r}) "
                          "needs its own --output (or the same --group-id)")


def read_owner(root: Path) -> dict[str, Any] | None:
    """The owner record of ``root``, or None when no sink has used it yet.

    Raises:
        ConfigError: when ``owner.json`` is not an owner record.
    """
    path = root / OWNER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigError(f"{path} is not an owner record ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not an owner record")
    return data


def _create(path: Path, owner: dict[str, str]) -> None:
    tmp = path.with_name(f".{OWNER_FILE}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(owner, fh, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # fails if another sink claimed it first: then its claim counts
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
