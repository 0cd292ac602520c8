"""Regenerated conversations on the real broker and the SGLang stand-in, in both history modes.

Every turn's row must hold exactly the prompt an independent re-rendering gives (the tokenizer's
own apply_chat_template on the history made of that conversation's earlier rows); every lane must
end (complete, truncated with a reason, or dead-lettered); a SIGKILLed worker must not lose or
double a turn; a regenerated tool call that does not match the cached result truncates; two
parallel calls pair with the two cached results that follow them, and their lanes complete.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.conversation_support import Pipeline, Rerendering, lanes_of, read_rows

pytestmark = pytest.mark.kafka

SYSTEM = {"role": "system", "content": "You are a careful assistant. Use tools when they help."}
PYTHON = {"type": "function", "function": {"name": "run_python", "description": "Run Python, return stdout.",
                                           "parameters": {"type": "object",
                                                          "properties": {"code": {"type": "string"}},
                                                          "required": ["code"]}}}


def call(call_id: str, code: str) -> dict:
    return {"role": "assistant", "content": "", "reasoning_content": "Code is exact.",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}]}


def tool_row(i: int) -> dict:
    """Four assistant turns: a call, the answer after its cached result, a call for the follow-up
    question, the answer after that call's cached result."""
    return {"id": f"tools-{i}", "tools": [PYTHON], "messages": [
        SYSTEM,
        {"role": "user", "content": f"What is {i} to the power of 7?"},
        call(f"call_{i}a", f"print({i}**7)"),
        {"role": "tool", "tool_call_id": f"call_{i}a", "content": json.dumps({"stdout": f"{i ** 7}\n"})},
        {"role": "assistant", "content": f"It is {i ** 7}."},
        {"role": "user", "content": "And how many digits is that?"},
        call(f"call_{i}b", f"print(len(str({i}**7)))"),
        {"role": "tool", "tool_call_id": f"call_{i}b",
         "content": json.dumps({"stdout": f"{len(str(i ** 7))}\n"})},
    ]}


def chat_row(i: int) -> dict:
    """Three user turns, reasoning in the source's answers (never sent: the model's own are)."""
    return {"id": f"chat-{i}", "messages": [
        {"role": "user", "content": f"Name a prime above {10 * i}."},
        {"role": "assistant", "content": "31.", "reasoning_content": "Check small primes."},
        {"role": "user", "content": "Why is it prime?"},
        {"role": "assistant", "content": "No divisor up to its square root."},
        {"role": "user", "content": "Give another one."},
    ]}


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def rerendering() -> Rerendering:
    return Rerendering()


def check_rows(rows: list[dict], sources: dict[str, dict], mode: str, rerendering: Rerendering) -> Counter:
    """Every row's prompt is the independent re-rendering of its lane's earlier rows; returns turn counts."""
    assert len({r["id"] for r in rows}) == len(rows)
    turns_per_lane: Counter = Counter()
    for (_, _lane), turns in lanes_of(rows).items():
        source = sources[turns[0]["source_row"]]
        assert {r["history_mode"] for r in turns} == {mode}
        expected = (rerendering.rerender_prompts if mode == "rerender" else rerendering.tokens_prompts)(
            source, turns)
        for row, prompt in zip(turns, expected, strict=True):
            n = row["prompt_len"]
            assert list(row["input_ids"][:n]) == prompt, (row["source_row"], row["turn_index"])
            assert list(row["loss_mask"]) == [0] * n + [1] * (row["seq_len"] - n)
        turns_per_lane[len(turns)] += 1
    return turns_per_lane


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_every_turn_is_regenerated_from_the_models_own_history(mode, kafka_config, standin_factory, tmp_path,
                                                               rerendering):
    rows = [tool_row(i) for i in range(3, 7)] + [chat_row(i) for i in range(3)]
    inputs = write_rows(tmp_path / "conversations.jsonl", rows)
    url = standin_factory(*STANDIN_FLAGS)
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        pipeline.produce(inputs, mode=mode, samples=2)
        view = pipeline.wait_ended(lanes=2 * len(rows))
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    got = read_rows(tmp_path / "dataset")
    assert len(got) == view.turns_done
    turns = check_rows(got, {r["id"]: r for r in rows}, mode, rerendering)
    assert view.ended == {"complete": 14}, view
    assert turns == {4: 8, 3: 6}, (turns, view)  # every lane ran to the end of its source
    assert view.ended == {"complete": 14} and view.in_progress == 0
    calls = {(r["source_row"].split("-")[0], r["turn_index"]) for r in got if r["has_tool_call"]}
    assert calls == {("tools", 0), ("tools", 2)}  # the regenerated calls, paired with cached results
    assert any(r["has_reasoning"] for r in got if r["turn_index"] > 0)


# Every tool-bearing turn that answers a user calls an offered tool, one call at a time (the
# stand-in never calls right after a tool response), so the lanes follow their sources' shape.
OUTPUTS = ("--think-fraction", "0.5", "--length-fraction", "0", "--output-len-mean", "24",
           "--output-len-sigma", "0.3",
           "--tool-call-fraction", "1.0", "--parallel-tool-call-fraction", "0")
STANDIN_FLAGS = ("--latency-model", "none", *OUTPUTS)


def test_a_worker_killed_mid_conversation_still_gives_every_turn_exactly_once(kafka_config, standin_factory,
                                                                              tmp_path, rerendering):
    rows = [tool_row(i) for i in range(3, 6)] + [chat_row(i) for i in range(4)]
    inputs = write_rows(tmp_path / "conversations.jsonl", rows)
    url = standin_factory("--decode-step-ms", "4", *OUTPUTS)
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path)
    try:
        first = pipeline.start_worker("--session-timeout", "6")
        pipeline.produce(inputs, mode="tokens", samples=2)
        pipeline.wait_ended(lanes=2 * len(rows), turns=len(rows))  # the first turns are through
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        pipeline.start_worker("--session-timeout", "6")
        view = pipeline.wait_ended(lanes=2 * len(rows), timeout=120)
        pipeline.wait_rows(view.turns_done)
        time.sleep(1)  # a late duplicate would land now
    finally:
        pipeline.close()
    got = read_rows(tmp_path / "dataset")
    assert len(got) == view.turns_done  # each turn once: no row lost, none doubled
    turns = check_rows(got, {r["id"]: r for r in rows}, "tokens", rerendering)
    assert turns == {4: 6, 3: 8} and view.ended == {"complete": 14}


def test_a_regenerated_call_that_does_not_match_the_cached_result_truncates(kafka_config, standin_factory,
                                                                            tmp_path):
    row = tool_row(9)
    cached = row["messages"][2]["tool_calls"][0]["function"]
    cached["name"] = "lookup_secret"  # the source called a tool the regenerated turn does not call
    inputs = write_rows(tmp_path / "mismatch.jsonl", [row, chat_row(9)])
    url = standin_factory("--latency-model", "none", *OUTPUTS)
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        pipeline.produce(inputs, mode="rerender", samples=3)
        view = pipeline.wait_ended(lanes=6)
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    assert view.in_progress == 0
    assert view.truncated == {"tool_call_mismatch": 3} and view.ended == {"truncated": 3, "complete": 3}
    got = read_rows(tmp_path / "dataset")
    tool_rows = [r for r in got if r["source_row"] == "tools-9"]
    assert {r["turn_index"] for r in tool_rows} == {0} and all(r["has_tool_call"] for r in tool_rows)


def parallel_row(i: int) -> dict:
    """``tool_row`` with two calls in each call turn, and both cached results after it."""
    row = tool_row(i)
    messages = row["messages"]
    for at in (6, 2):
        first = messages[at]["tool_calls"][0]
        second = {**first, "id": first["id"] + "2"}
        messages[at]["tool_calls"].append(second)
        result = {"role": "tool", "tool_call_id": second["id"], "content": json.dumps({"stdout": "ok\n"})}
        messages.insert(at + 2, result)
    row["id"] = f"parallel-{i}"
    return row


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_parallel_calls_pair_with_the_cached_results_and_complete(mode, kafka_config, standin_factory,
                                                                  tmp_path, rerendering):
    rows = [parallel_row(i) for i in range(3, 5)]
    inputs = write_rows(tmp_path / "parallel.jsonl", rows)
    flags = [*STANDIN_FLAGS]
    flags[flags.index("--parallel-tool-call-fraction") + 1] = "1"  # every call turn makes two calls
    url = standin_factory(*flags)
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        pipeline.produce(inputs, mode=mode, samples=2)
        view = pipeline.wait_ended(lanes=2 * len(rows))
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    assert view.ended == {"complete": 4} and view.in_progress == 0, view
    got = read_rows(tmp_path / "dataset")
    assert check_rows(got, {r["id"]: r for r in rows}, mode, rerendering) == {4: 4}
    call_id = rerendering.tok.convert_tokens_to_ids("<tool_call>")
    calls = {r["turn_index"]: list(r["input_ids"][r["prompt_len"]:]).count(call_id) for r in got}
    assert calls == {0: 2, 1: 0, 2: 2, 3: 0}  # both parallel calls paired, then the answer after them
