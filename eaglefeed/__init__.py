"""eaglefeed: token-exact training data for speculative-decoding draft models.

The Python API is :func:`load` (a dataset's rows as a pyarrow Table or a ``datasets.Dataset``);
everything else runs as the ``eaglefeed`` command. Importing the package stays light (no
pyarrow, Kafka or transformers): :func:`load` imports what it needs when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglefeed.core import quiet as _quiet

if TYPE_CHECKING:  # annotations only: the package's namespace stays the API
    import os
    from collections.abc import Sequence
    from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load"]

_quiet.install()


def load(root: str | os.PathLike[str], format: str | None = None, *, columns: Sequence[str] | None = None,
         max_length: int | None = None, policy: str | None = None, as_dataset: bool = False,
         hidden_states: bool = False, lanes: bool = False) -> Any:
    """Read the live rows of the dataset at ``root`` (the sink's ``--output``) into memory.

    Only the files the manifest lists are read, each once, so a load while the sink or a
    compaction runs is consistent. For datasets larger than memory, read the files one at a time
    (``eaglefeed stats DIR --files`` lists them) or stream an export.

    Args:
        root: the dataset directory.
        format: None for every column (``id``, ``input_ids``, ``loss_mask``, ``prompt_len``,
            ``seq_len``, sampling and provenance columns), or an ``eaglefeed export`` format
            (``specforge``, ``speculators``): the rows and columns that export writes.
        columns: read only these columns (without ``format``).
        max_length: with ``format``: the longest row to keep whole (``export --max-length``).
        policy: with ``max_length``: ``drop``, ``truncate`` or ``error``.
        as_dataset: return a ``datasets.Dataset`` (``pip install datasets``) instead of a
            ``pyarrow.Table``.
        hidden_states: return a sequence of row dicts whose ``hidden_states`` opens the row's
            states lazily, memory-mapped: ``.raw`` (stored dtype), ``.float32()``, ``.torch()``.
        lanes: with ``hidden_states``: each ``tokens`` conversation lane as one row (its final
            turn's ids, a loss mask on every generated span, the states of all its turns).

    Returns:
        a ``pyarrow.Table``, a ``datasets.Dataset`` with ``as_dataset``, or with ``hidden_states``
        a sequence of row dicts (``eaglefeed.dataset.hidden_rows.HiddenStateRows``).

    Raises:
        DatasetError: ``root`` is not a dataset, a file cannot be read, or ``policy`` is
            ``error`` and a row is longer than ``max_length``.
        ValueError: an unknown format, column or policy.
        ConfigError: ``as_dataset`` without the ``datasets`` package.

    Example:
        >>> import eaglefeed
        >>> rows = eaglefeed.load("dataset", format="specforge", as_dataset=True)  # doctest: +SKIP
        >>> rows.map(lambda row: {"loss_tokens": sum(row["loss_mask"])})  # doctest: +SKIP
    """
    from eaglefeed.dataset import load as _load  # pyarrow and the dataset code, only when called

    return _load(root, format, columns=columns, max_length=max_length, policy=policy, as_dataset=as_dataset,
                 hidden_states=hidden_states, lanes=lanes)
