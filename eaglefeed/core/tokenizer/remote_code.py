"""Tokenizers that run their own Python code (``auto_map``): spotted, refused in one line, or loaded.

Kimi-K2's tokenizer is a tiktoken vocabulary plus a class in a ``.py`` file beside it, named in
``tokenizer_config.json``'s ``auto_map``; transformers runs that file only with
``trust_remote_code=True``. Every command that loads a tokenizer goes through
:func:`load_tokenizer`, which always passes a bool (with None, transformers asks ``[y/N]`` on a
terminal) and turns transformers' refusal into one line that names ``--trust-remote-code``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer.files import tokenizer_config, tokenizer_file
from eaglefeed.core.tokenizer.hub import hub_unreachable, one_copy_of_hub_logs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TRUST_FLAG = "--trust-remote-code"
_RELATIVE_IMPORT = re.compile(r"^\s*(?:from\s+\.(\w+)\s+import|import\s+\.(\w+))", re.MULTILINE)


class RemoteCodeError(ConfigError):
    """A tokenizer needs its own Python code run and ``--trust-remote-code`` was not given."""


def remote_code_refusal(tokenizer_id: str, *, hint: str = "") -> RemoteCodeError:
    """The one line that refuses ``tokenizer_id``'s own code and names the flag.

    Args:
        tokenizer_id: the tokenizer (directory or hub id).
        hint: text appended (e.g. another way out).
    """
    found = remote_code_class(tokenizer_id)
    where = f" ({found}, named in its auto_map)" if found else ""
    return RemoteCodeError(f"tokenizer {tokenizer_id!r} runs its own Python code{where}: pass {TRUST_FLAG} "
                           f"(or EAGLEFEED_TRUST_REMOTE_CODE=1) to run it{hint}")


def remote_code_class(tokenizer_id: str) -> str | None:
    """The tokenizer class ``tokenizer_id`` names in its ``auto_map`` (``module.Class``), else None.

    Only a ``tokenizer_config.json`` already on this host is read (a directory or the Hugging Face
    cache); an unreadable one counts as naming no code.

    Args:
        tokenizer_id: a tokenizer directory or a Hugging Face repo id.
    """
    config = tokenizer_config(tokenizer_id)
    auto_map = config.get("auto_map")
    entry = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else auto_map
    if isinstance(entry, (list, tuple)):  # [slow class, fast class], either may be null
        entry = next((e for e in reversed(entry) if isinstance(e, str)), None)
    return entry if isinstance(entry, str) and entry else None


def load_tokenizer(tokenizer_id: str, *, trust_remote_code: bool, hint: str = "") -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained`` that never prompts and refuses remote code in one line.

    transformers decides whether the tokenizer needs its own code (a class it ships may stand in
    for the one ``auto_map`` names); it is always passed a bool, so it never asks.

    Args:
        tokenizer_id: a tokenizer directory or a Hugging Face repo id.
        trust_remote_code: run the tokenizer's own Python code (``--trust-remote-code``).
        hint: text appended to a refusal.

    Raises:
        RemoteCodeError: the tokenizer needs its own code and ``trust_remote_code`` is off.
        OSError: (and ValueError) whatever transformers raises for a tokenizer it cannot load.
    """
    from transformers import AutoTokenizer

    one_copy_of_hub_logs()
    # A hub id with no hub to reach is loaded from the cache alone: at once, not after 48 s of retries
    offline = None if _is_directory(tokenizer_id) else hub_unreachable()
    try:
        return AutoTokenizer.from_pretrained(tokenizer_id, trust_remote_code=bool(trust_remote_code),
                                             **({"local_files_only": True} if offline else {}))
    except ValueError as exc:
        if not trust_remote_code and "trust_remote_code" in str(exc):
            raise remote_code_refusal(tokenizer_id, hint=hint) from None
        raise
    except OSError as exc:
        if offline is None:
            raise
        raise OSError(f"not in the Hugging Face cache, and the hub is out of reach ({offline}): download "
                      f"it where there is a network, or pass a local directory") from exc


def _is_directory(tokenizer_id: str) -> bool:
    try:
        return Path(tokenizer_id).is_dir()
    except (OSError, ValueError):  # not a valid path at all
        return False


def runs_remote_code(tokenizer: object) -> bool:
    """Whether a loaded tokenizer's class came from the tokenizer's own files (transformers_modules)."""
    return type(tokenizer).__module__.startswith("transformers_modules.")


def remote_code_files(tokenizer_id: str) -> tuple[str, ...]:
    """The ``.py`` files of the tokenizer's own code: the ``auto_map`` module and what it imports beside it.

    Relative imports (``from .helpers import x``) are followed as transformers follows them; only
    files on this host are read. Empty for a tokenizer without code of its own.

    Args:
        tokenizer_id: a tokenizer directory or a Hugging Face repo id.
    """
    found = remote_code_class(tokenizer_id)
    if found is None or "--" in found:  # "other/repo--module.Class": code from another repo
        return ()
    todo, seen, files = [found.rsplit(".", 1)[0] + ".py"], set(), []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = tokenizer_file(tokenizer_id, name)
        try:
            text = path.read_text(encoding="utf-8") if path is not None else None
        except (OSError, UnicodeDecodeError):
            text = None
        if text is not None:
            files.append(name)
            todo.extend(f"{a or b}.py" for a, b in _RELATIVE_IMPORT.findall(text))
    return tuple(sorted(files))

