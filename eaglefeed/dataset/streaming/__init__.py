"""Streaming rows to trainers as they become durable, and what trainers have consumed.

``position``: which rank a row belongs to and what one rank has delivered this epoch;
``record``: each trainer group's consumption record in ``DATASET/consumers/<group>/``;
``usage``: the hidden-state bytes stored and not yet consumed (the workers' budget, ``status``);
``budget``: the workers' ``--hidden-states-budget`` files, which ``status`` shows;
``reader``: :class:`RowStream`, what ``eaglefeed.stream`` returns (``iterable`` makes it a
PyTorch ``IterableDataset`` when torch is installed).
"""

from eaglefeed.dataset.streaming.iterable import stream
from eaglefeed.dataset.streaming.position import StreamPosition, shard_of
from eaglefeed.dataset.streaming.reader import RowStream
from eaglefeed.dataset.streaming.usage import StatesUsage, delete_consumed, measure

__all__ = ["RowStream", "StatesUsage", "StreamPosition", "delete_consumed", "measure", "shard_of", "stream"]
