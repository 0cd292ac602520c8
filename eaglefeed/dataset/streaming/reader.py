"""``eaglefeed.stream``: a dataset's rows with their states, as they become durable, for one trainer rank.

The stream reads the manifest from its start, then only the lines appended since
(:class:`~eaglefeed.dataset.manifest.ManifestReader`), and visits each file that is live once
its event is read: a sink's flush brings new rows, a compaction or ``capture`` brings rows seen
before in another file, which the position skips (:mod:`eaglefeed.dataset.streaming.position`:
rows are known by id). A file listed and then gone when opened was replaced by a later event,
whose file holds its rows. So a row is delivered once per epoch to one rank of the group,
whatever compaction does meanwhile.

The position is taken with :meth:`RowStream.state_dict`, which is also the commit: it writes
the rank's consumption record (:mod:`eaglefeed.dataset.streaming.record`) and, in keep-tokens
mode, deletes the states every subscribed group consumed. A trainer takes it when it saves a
checkpoint, and resumes with :meth:`RowStream.load_state_dict` (the rows delivered after that
checkpoint are delivered again: the model restored never saw them).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.hidden_rows import HiddenStates
from eaglefeed.dataset.hidden_states import STORE, HiddenStatesRef
from eaglefeed.dataset.manifest import MANIFEST, ManifestReader
from eaglefeed.dataset.shards import TRAINING_SCHEMA, conform
from eaglefeed.dataset.store import is_remote, mirror_of, open_dataset
from eaglefeed.dataset.streaming.position import DIGEST, DigestSet, StreamPosition, digest, shard_of
from eaglefeed.dataset.streaming.record import (
    Record,
    read_record,
    read_store_record,
    record_path,
    write_record,
    write_store_record,
)
from eaglefeed.dataset.streaming.usage import StatesMeter, delete_consumed

log = logging.getLogger(__name__)

BATCH_ROWS = 256


class RowStream:
    """One trainer rank's rows: an iterable of row dicts (``hidden_states`` opens the row's states lazily).

    Iterating runs one epoch: every row of this rank's shard that is durable (and, with ``follow``,
    that becomes durable until ``idle_seconds`` pass without a new one), each once. Iterating
    again runs the next epoch. See the module for positions and the consumption record.

    Args:
        where: the dataset (the sink's ``--output``), or ``s3://bucket/prefix``: its mirror is
            pulled again at each look for new rows, the rank's record is an object of the store
            (what workers on any host count), and the mirror's copy of a row's states is deleted
            once a position is taken after it (a trainer host's disk holds one checkpoint's worth).
        group: the trainer group; each group receives every row once per epoch.
        rank: this rank, and ``world_size`` the group's ranks: the rows are split between them by id.
        follow: wait for rows that are not durable yet (False: the epoch ends at what is there).
        idle_seconds: with ``follow``, end the epoch after this long without a new row (None: never).
        poll_seconds: with ``follow``, how often the manifest is looked at for new rows.
        delete_states: keep-tokens mode: once every subscribed group consumed a row, delete its
            state file when a position is taken (the token rows stay).
        state: a position from :meth:`state_dict` to resume from (as :meth:`load_state_dict`).
    """

    def __init__(self, where: str | os.PathLike[str], *, group: str = "default", rank: int = 0,
                 world_size: int = 1, follow: bool = False, idle_seconds: float | None = None,
                 poll_seconds: float = 1.0, delete_states: bool = False,
                 state: Mapping[str, Any] | None = None) -> None:
        self.where = where
        self.root = open_dataset(where)
        remote = mirror_of(self.root)  # a store's mirror knows its store (open_dataset made it)
        self._store = remote.store if remote is not None else None
        if not (self.root / MANIFEST).is_file():
            raise DatasetError(f"{where} is not an eaglefeed dataset (no {MANIFEST})")
        self.follow, self.idle_seconds, self.poll_seconds = follow, idle_seconds, poll_seconds
        self.delete_states = delete_states
        self.position = StreamPosition(group=group, rank=rank, world_size=world_size)
        self.states = DigestSet()
        self._pending: dict[bytes, str] = {}  # the state files of rows delivered since the last commit
        self._meter = StatesMeter(self.root, store=self._store)
        before = self._read_record()
        if before is not None:  # the states this rank consumed before count as consumed still
            self.states = before.states
        if state is not None:
            self.load_state_dict(state)
        self._commit()  # subscribes the group: from now on its consumption counts

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """One epoch of this rank's rows; the next epoch starts once it ended."""
        reader = ManifestReader(self.root)
        live: dict[str, None] = {}  # the live files, in the order their events added them
        visited: set[str] = set()
        quiet_since = time.monotonic()
        while True:
            if is_remote(self.where):
                open_dataset(self.where)  # pull the store's new events into the mirror
            restarted, events = reader.read()
            if restarted:
                raise DatasetError(f"{self.root}: the dataset was started again while a stream read it")
            for event in events:
                for rel in event.get("removed", ()):
                    live.pop(rel, None)
                for seg in event.get("added", ()):
                    live[seg["path"]] = None
            delivered = 0
            for rel in [p for p in live if p not in visited]:
                visited.add(rel)
                for row in self._rows_of(rel):
                    delivered += 1
                    yield row
            if delivered:
                quiet_since = time.monotonic()
            elif not events:
                if not self.follow or (self.idle_seconds is not None
                                       and time.monotonic() - quiet_since >= self.idle_seconds):
                    break
                time.sleep(self.poll_seconds)
        # Not committed here: a DataLoader reaches the end while it still collates the last batch,
        # whose states keep-tokens mode would delete. The next state_dict() commits the epoch.
        self.position.next_epoch()

    def _rows_of(self, rel: str) -> Iterator[dict[str, Any]]:
        """The rows of ``rel`` this rank has not delivered this epoch (none if it was replaced meanwhile)."""
        try:
            reader = pq.ParquetFile(self.root / rel)
            ids = reader.read(columns=["id"]).column("id").to_pylist()
        except FileNotFoundError:
            return  # a later event replaced it: its rows are in that event's file
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read {self.root / rel}: {exc}") from exc
        pos = self.position
        mine = np.fromiter((shard_of(i, pos.world_size) == pos.rank for i in ids), bool, len(ids))
        digests = np.array([digest(i) for i in ids], DIGEST)
        wanted = mine & ~pos.delivered.contains(digests)
        if not wanted.any():
            return
        start = 0
        for batch in reader.iter_batches(batch_size=BATCH_ROWS):
            table = conform(pa.Table.from_batches([batch]), TRAINING_SCHEMA).cast(TRAINING_SCHEMA)
            take = np.flatnonzero(wanted[start:start + table.num_rows])
            start += table.num_rows
            if not take.size:
                continue
            for row in table.take(pa.array(take)).to_pylist():
                if digest(row["id"]) in pos.delivered:
                    continue  # (an id twice in one file: never written so, but never delivered twice)
                pos.deliver(row["id"])
                record = row.get("hidden_states")
                if record:
                    ref = HiddenStatesRef.from_record(record)
                    name = Path(ref.uri).name
                    self._pending[digest(name)] = name
                    row["hidden_states"] = HiddenStates(self.root, ref)
                yield row

    def state_dict(self) -> dict[str, Any]:
        """This rank's position, to save with the trainer's checkpoint; also its commit.

        Writes the rank's consumption record (what the workers' budget reads) and, in keep-tokens
        mode, deletes the states every subscribed group has consumed. Take it when the rows
        delivered so far are in the model being saved.
        """
        self._commit()
        return self.position.to_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a position :meth:`state_dict` gave (the next iteration continues its epoch).

        Raises:
            ValueError: not a position, or one of another group, rank or world size.
        """
        position = StreamPosition.from_state(state)
        mine = (self.position.group, self.position.rank, self.position.world_size)
        theirs = (position.group, position.rank, position.world_size)
        if theirs != mine:
            raise ValueError(f"a position of group {theirs[0]!r} rank {theirs[1]} of {theirs[2]} cannot "
                             f"resume group {mine[0]!r} rank {mine[1]} of {mine[2]}")
        self.position = position

    def _read_record(self) -> Record | None:
        if self._store is not None:
            return read_store_record(self._store, self.position)
        path = record_path(self.root, self.position)
        return read_record(path) if path.is_file() else None

    def _commit(self) -> None:
        for key in self._pending:
            self.states.add(key)
        record = Record(position=self.position, states=self.states)
        if self._store is not None:
            write_store_record(self._store, record)
            for name in self._pending.values():  # the mirror is a cache: the rows are in the model now
                (self.root / STORE / name).unlink(missing_ok=True)
        else:
            write_record(self.root, record)
        self._pending.clear()
        if self.delete_states:
            files, freed = delete_consumed(self.root, self._meter)
            if files:
                log.debug("deleted %d consumed state files (%d bytes)", files, freed)

