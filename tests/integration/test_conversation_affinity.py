"""Conversation affinity on the real broker and three stand-ins, each with its own prefix cache.

Two workers of one group (each with its own server pool) regenerate 3-turn conversations: every
turn >= 1 must run on the server that ran the turn before, so most of its prompt (the earlier
turns' prompt and output) comes from that server's cache, and ``eaglefeed stats`` sums it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglefeed.core.config import SamplingDefaults
from eaglefeed.dataset.stats import compute_stats
from tests.integration.conversation_support import Pipeline, lanes_of, read_rows

pytestmark = pytest.mark.kafka

STANDIN = ("--tool-call-fraction", "0", "--length-fraction", "0", "--output-len-mean", "150",
           "--output-len-sigma", "0.3", "--decode-step-ms", "4")
CONVERSATIONS = 12


def row(i: int) -> dict:
    return {"id": f"aff-{i}", "messages": [
        {"role": "user", "content": f"Name a prime above {10 * i}."},
        {"role": "assistant", "content": "31."},
        {"role": "user", "content": "Why is it prime?"},
        {"role": "assistant", "content": "No divisor up to its square root."},
        {"role": "user", "content": "Give another one."},
    ]}


def test_every_later_turn_runs_where_its_prefix_is_cached(kafka_config, standin_factory, tmp_path: Path):
    urls = [standin_factory(*STANDIN) for _ in range(3)]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row(i)) + "\n" for i in range(CONVERSATIONS)))
    pipeline = Pipeline(kafka_config, urls[0], tmp_path / "dataset", tmp_path)
    try:
        others = [a for u in urls[1:] for a in ("--sglang-url", u)]
        for _ in range(2):
            pipeline.start_worker(*others)
        pipeline.produce(source, mode="tokens", samples=1, max_turns=3,
                         sampling=SamplingDefaults(max_new_tokens=1024))
        view = pipeline.wait_ended(CONVERSATIONS)
        assert view.ended == {"complete": CONVERSATIONS}
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    rows = read_rows(tmp_path / "dataset")
    assert len(rows) == 3 * CONVERSATIONS == len({r["id"] for r in rows})
    lanes = lanes_of(rows)
    assert len({turns[0]["endpoint"] for turns in lanes.values()}) > 1  # conversations spread over servers
    later = [(turn, turns[k - 1]) for turns in lanes.values() for k, turn in enumerate(turns) if k]
    assert all(turn["endpoint"] == before["endpoint"] for turn, before in later)
    # Turn k+1's prompt starts with turn k's prompt and output, cached where turn k ran.
    for turn, before in later:
        assert turn["cached_tokens"] >= before["seq_len"] - 1 - 16, (turn["id"], turn["cached_tokens"])
    share = sum(t["cached_tokens"] for t, _ in later) / sum(t["prompt_len"] for t, _ in later)
    assert share >= 0.8
    stats = compute_stats(tmp_path / "dataset")
    assert stats.cached_tokens == sum(r["cached_tokens"] for r in rows)
    assert {t: v[0] for t, v in stats.by_turn.items()} == dict.fromkeys(range(3), CONVERSATIONS)
