"""A trainer rank for the streaming tests: ``python -m tests.integration.stream_trainer ARGS``.

It streams its rank's rows as they become durable, reads each row's states, appends each id it
received to ``--out`` and, every ``--every`` rows, takes a position into ``--checkpoint``
(written atomically) and appends ``CHECKPOINT`` after it: the ids before a rank's last
``CHECKPOINT`` are the ones its saved checkpoint holds.
"""

from __future__ import annotations

import argparse
import os
import pickle
import time
from pathlib import Path

import eaglefeed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("--group", default="default")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--idle-seconds", type=float, default=8.0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--delete-states", action="store_true")
    args = p.parse_args()
    state = pickle.loads(args.checkpoint.read_bytes()) if args.checkpoint.exists() else None
    rows = eaglefeed.stream(args.dataset, group=args.group, rank=args.rank, world_size=args.world_size,
                            follow=True, idle_seconds=args.idle_seconds, poll_seconds=0.1,
                            delete_states=args.delete_states, state=state)
    with open(args.out, "a") as out:
        for n, row in enumerate(rows, start=1):
            states = row["hidden_states"].float32()  # what a training step reads
            assert states.shape[0] == row["seq_len"] - 1
            out.write(row["id"] + "\n")
            out.flush()
            if n % args.every == 0:
                _save(args.checkpoint, rows.state_dict())
                out.write("CHECKPOINT\n")
                out.flush()
            time.sleep(args.delay)
        _save(args.checkpoint, rows.state_dict())
        out.write("CHECKPOINT\nEND\n")


def _save(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(pickle.dumps(state))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
