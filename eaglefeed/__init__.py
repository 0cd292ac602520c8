"""eaglefeed: token-exact training data for speculative-decoding draft models.

The Python API is :func:`load` (a dataset's rows as a pyarrow Table or a ``datasets.Dataset``)
and :func:`stream` (a trainer rank's rows with their states as they become durable);
everything else runs as the ``eaglefeed`` command. Importing the package stays light (no
pyarrow, Kafka, torch or transformers): each function imports what it needs when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eaglefeed.core import quiet as _quiet

if TYPE_CHECKING:  # annotations only: the package's namespace stays the API
    import os
    from collections.abc import Mapping, Sequence
    from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load", "stream"]

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


def stream(root: str | os.PathLike[str], *, group: str = "default", rank: int | None = None,
           world_size: int | None = None, follow: bool = False, idle_seconds: float | None = None,
           poll_seconds: float = 1.0, delete_states: bool = False,
           state: Mapping[str, Any] | None = None) -> Any:
    """A trainer rank's rows of the dataset at ``root``, with their states, as they become durable.

    An iterable of row dicts (the columns of :func:`load`; ``hidden_states`` opens the row's
    states lazily, memory-mapped: ``.raw``, ``.float32()``, ``.torch()``), and a PyTorch
    ``IterableDataset`` when torch is installed (use it with ``DataLoader(num_workers=0)``).
    Iterating runs one epoch: each row of this rank's share, once, whatever compaction does
    meanwhile; iterating again runs the next. The ranks of a group split the rows by id; each
    group receives all of them. docs/TRAINING.md ("Stream to a trainer") has the model.

    Args:
        root: the dataset directory (the sink's ``--output``), or ``s3://bucket/prefix``.
        group: the trainer group: every group receives every row once per epoch.
        rank: this rank (default: torch.distributed's when initialized, else ``RANK``, else 0).
        world_size: the group's ranks, which split the rows between them (default: as ``rank``,
            ``WORLD_SIZE``, else 1).
        follow: wait for new rows (False: the epoch ends at the rows durable now).
        idle_seconds: with ``follow``: end the epoch after this long without a new row (None: never).
        poll_seconds: with ``follow``: how often to look for new rows.
        delete_states: keep-tokens mode: delete a row's state file once every subscribed group
            consumed it (the token rows stay); frees the workers' ``--hidden-states-budget``.
        state: a position from ``.state_dict()`` to resume from.

    Returns:
        a :class:`eaglefeed.dataset.streaming.RowStream`. ``.state_dict()`` gives the position
        to checkpoint and commits it: the group's consumption record in ``root/consumers/``,
        which the workers' budget reads; ``.load_state_dict(state)`` resumes.

    Raises:
        DatasetError: ``root`` is not a dataset.
        ValueError: a rank outside the world size, or a position of another group or rank.

    Example:
        >>> import eaglefeed
        >>> rows = eaglefeed.stream("dataset", group="draft", follow=True, idle_seconds=600)  # doctest: +SKIP
        >>> for row in rows:  # doctest: +SKIP
        ...     states = row["hidden_states"].float32()  # [T, L, H]
    """
    from eaglefeed.dataset.streaming import stream as _stream  # pyarrow and the dataset code, when called

    return _stream(root, group=group, rank=rank, world_size=world_size, follow=follow,
                   idle_seconds=idle_seconds, poll_seconds=poll_seconds, delete_states=delete_states,
                   state=state)
