"""``eaglefeed.stream``: a ``RowStream``, and a PyTorch ``IterableDataset`` too when torch is installed.

The torch class is made at the first call: importing eaglefeed needs no torch.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any

from eaglefeed.dataset.streaming.reader import RowStream


def stream(where: str | os.PathLike[str], *, group: str = "default", rank: int | None = None,
           world_size: int | None = None, follow: bool = False, idle_seconds: float | None = None,
           poll_seconds: float = 1.0, delete_states: bool = False,
           state: Mapping[str, Any] | None = None) -> RowStream:
    """This rank's rows of the dataset ``where`` as they become durable (``eaglefeed.stream``'s body).

    ``rank`` and ``world_size`` default to torch.distributed's when it is initialized, else to
    the ``RANK`` and ``WORLD_SIZE`` variables, else to 0 of 1.
    """
    rank, world_size = _rank_and_world(rank, world_size)
    cls = _torch_class() or RowStream
    made: RowStream = cls(where, group=group, rank=rank,
                          world_size=world_size, follow=follow, idle_seconds=idle_seconds,
                          poll_seconds=poll_seconds, delete_states=delete_states, state=state)
    return made


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        return rank, world_size
    found = _distributed()
    if found is None:
        found = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def _distributed() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


@functools.cache
def _torch_class() -> type[RowStream] | None:
    """``RowStream`` mixed with ``torch.utils.data.IterableDataset``; None without torch."""
    try:
        from torch.utils.data import IterableDataset, get_worker_info  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def __iter__(self: RowStream) -> Iterator[dict[str, Any]]:  # noqa: N807 - the method's own name
        info = get_worker_info()
        if info is not None:  # a worker process iterates a copy: the trainer's state_dict() would not move
            raise ValueError("eaglefeed.stream: use DataLoader(num_workers=0): the position is the "
                             "iterator's, in the trainer's process (the states are memory-mapped: cheap)")
        return RowStream.__iter__(self)

    made: type[RowStream] = type("TorchRowStream", (RowStream, IterableDataset), {"__iter__": __iter__})
    return made
