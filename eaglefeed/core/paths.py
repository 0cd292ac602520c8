"""Checks of output paths given on the command line, so a typo is one clear line before any work."""

from __future__ import annotations

import os
from pathlib import Path

from eaglefeed.core.errors import ConfigError


def check_writable_file(path: Path, flag: str) -> None:
    """Make sure a file can be created at ``path`` (its folder exists and is writable).

    Args:
        path: the file the command will write.
        flag: the flag that named it, for the message (e.g. ``--out``).

    Raises:
        ConfigError: one line naming the flag, the path and why.
    """
    folder = Path(path).absolute().parent
    if path.is_dir():
        reason = "it is a folder"
    elif not folder.is_dir():
        reason = f"no folder {folder}"
    elif not os.access(folder, os.W_OK | os.X_OK):
        reason = f"{folder} is not writable"
    else:
        return
    raise ConfigError(f"{flag} {path}: cannot write there ({reason})")
