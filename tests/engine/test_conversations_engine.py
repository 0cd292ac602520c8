"""Regenerated conversations on a real vLLM (CPU, the tiny seeded Llama), in both history modes.

The same checks as tests/integration/test_conversations.py, on a real engine: every turn-k row's
prompt is an independent re-rendering of the history made of that conversation's earlier rows,
every generated id is the engine's own (asked again directly), and every lane ends with a reason.
A random model writes no tool calls, so the tool-bearing rows end after their first turn with
``tool_result_without_call`` (the cached result has no regenerated call to pair with), while the
chat rows run all their turns. Sampled (seeded) with a stop set of one id in eight, so turns are
a few tokens long and end with ``stop``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig, SamplingDefaults
from tests.engine.conftest import VllmServer
from tests.engine.pipeline_support import engine_ids
from tests.integration.conversation_support import Pipeline, Rerendering, lanes_of, read_rows
from tests.integration.test_conversations import chat_row, tool_row, write_rows

pytestmark = pytest.mark.engine

STOPS = (2, *range(8, 4096, 8))  # <|im_end|> and one id in eight


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_conversations_on_the_real_engine(mode: str, vllm_server: VllmServer, kafka_config: KafkaConfig,
                                          tmp_path: Path) -> None:
    rows = [chat_row(i) for i in range(4)] + [tool_row(i) for i in range(3, 5)]
    inputs = write_rows(tmp_path / "conversations.jsonl", rows)
    pipeline = Pipeline(kafka_config, vllm_server.url, tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        pipeline.produce(inputs, mode=mode, samples=2, sampling=SamplingDefaults(
            max_new_tokens=48, temperature=1.0, top_p=1.0, top_k=-1, seed=7, stop_token_ids=STOPS))
        view = pipeline.wait_ended(lanes=2 * len(rows), timeout=300)
        pipeline.wait_rows(view.turns_done, timeout=120)
    finally:
        pipeline.close()
    got = read_rows(tmp_path / "dataset")
    assert len(got) == view.turns_done and len({r["id"] for r in got}) == len(got)
    assert view.in_progress == 0, view
    rerendering = Rerendering()
    sources = {r["id"]: r for r in rows}
    turns: Counter[tuple[str, int]] = Counter()
    for (_, _lane), lane in lanes_of(got).items():
        source = sources[lane[0]["source_row"]]
        expected = (rerendering.rerender_prompts if mode == "rerender" else rerendering.tokens_prompts)(
            source, lane)
        for row, prompt in zip(lane, expected, strict=True):
            n = row["prompt_len"]
            assert list(row["input_ids"][:n]) == prompt, (row["source_row"], row["turn_index"])
            sent = json.loads(row["sampling_params"])
            assert list(row["input_ids"][n:]) == engine_ids(vllm_server.url, prompt, sent, row["id"])
            assert row["engine"] == "vllm"
        turns[(source["id"].split("-")[0], len(lane))] += 1
    assert turns[("chat", 3)] >= 4, (turns, view)  # chat lanes ran their three turns
    assert view.truncated.get("tool_result_without_call", 0) >= 2, view
    print(f"\n{mode}: {view.lines()}")
