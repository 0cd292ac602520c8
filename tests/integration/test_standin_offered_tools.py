"""The stand-in calls the tools a prompt offers, however the family's template declares them (issue 36).

Per family, its tokenizer (tests/toolcall_tokenizers.py, each template declaring tools as its
published one does; and Kimi-K2's remote-code tokenizer, tests/remote_tokenizer.py) renders
conversations that each offer tools of their own; the stand-in serves the worker with
``--tool-call-format`` and a 0.7 share of calls; the converse stage parses each turn. Every row's
calls, read back with the pipeline's parser, name a tool their prompt offered, with argument names
from that tool's schema; lanes whose source caches a call's result go on past the call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from eaglefeed.chat.conversation.markers import split_markers_for
from eaglefeed.chat.conversation.split import CONTENT, split_output
from eaglefeed.chat.conversation.toolcalls import parse_content
from tests.conversation_rows import WEATHER
from tests.integration.conversation_support import Pipeline, lanes_of, read_rows
from tests.remote_tokenizer import write_remote_tokenizer
from tests.toolcall_tokenizers import FORMAT_NAMES, write_family_tokenizer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

OFFERING = 8  # conversations that offer three tools of their own and end after the first turn
CONTINUING = 5  # conversations whose source calls get_weather and caches its result
STANDIN = ("--latency-model", "none", "--think-fraction", "0.3", "--length-fraction", "0",
           "--output-len-mean", "24", "--output-len-sigma", "0.3", "--tool-call-fraction", "0.7",
           "--parallel-tool-call-fraction", "0.25")
KIMI_REMOTE = "kimi_k2-remote-code"


def _tools(i: int) -> list[dict[str, Any]]:
    """Three tools named for conversation ``i``: nested, array and enum parameters, and none at all."""
    def tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": required}}}

    when = {"type": "object", "properties": {"day": {"type": "integer"}, "tz": {"type": "string"}}}
    return [tool(f"find_flight_{i}", "Flights between two cities", {
                "origin": {"type": "string", "description": "where from"}, "when": when,
                "cabin": {"type": "string", "enum": ["economy", "business"]}}, ["origin"]),
            tool(f"read_files_{i}", "Read files", {"paths": {"type": "array", "items": {"type": "string"}}},
                 []),
            tool(f"clock_{i}", "The time now", {}, [])]


def _rows() -> list[dict[str, Any]]:
    rows = [{"id": f"offer-{i}", "tools": _tools(i), "messages": [
        {"role": "system", "content": "Use a tool when it helps."},
        {"role": "user", "content": f"Plan trip {i}: a flight from Oslo, and the time."}]}
        for i in range(OFFERING)]
    call = {"id": "w1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    rows += [{"id": f"continue-{i}", "tools": [WEATHER], "messages": [
        {"role": "user", "content": f"Weather in Oslo on day {i}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "w1", "name": "get_weather", "content": "snow"},
        {"role": "assistant", "content": "Snow in Oslo."}]} for i in range(CONTINUING)]
    return rows


def _tokenizer(family: str, tmp_path: Path) -> tuple[str, Path, bool]:
    """(its tool-call format, its folder, whether it runs its own code)."""
    if family == KIMI_REMOTE:
        return "kimi_k2", write_remote_tokenizer(tmp_path / "kimi-remote"), True
    return family, write_family_tokenizer(family, tmp_path / f"tokenizer-{family}"), False


@pytest.mark.parametrize("family", [*FORMAT_NAMES, KIMI_REMOTE])
def test_the_standins_calls_name_the_tools_each_prompt_offers(family, kafka_config, standin_factory,
                                                               tmp_path):
    fmt, folder, remote = _tokenizer(family, tmp_path)
    sources = {row["id"]: row for row in _rows()}
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sources.values()),
                      encoding="utf-8")
    url = standin_factory("--tokenizer", str(folder), "--tool-call-format", fmt, *STANDIN,
                          *(("--trust-remote-code",) if remote else ()))
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path, trust_remote_code=remote)
    try:
        pipeline.start_worker()
        pipeline.produce(inputs, mode="rerender", samples=1, tokenizer=folder)
        view = pipeline.wait_ended(lanes=len(sources))
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    assert view.truncated.get("tool_call_unparsable", 0) == 0 and view.in_progress == 0, view

    tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=remote)
    markers = split_markers_for(tok)

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    rows = read_rows(tmp_path / "dataset")
    called: dict[str, list[str]] = {}
    for row in rows:
        tools = sources[row["source_id"]]["tools"]
        split = split_output(list(row["input_ids"][row["prompt_len"]:]), markers)
        parsed = parse_content(split.ids_of(CONTENT), markers, decode, fmt, tools)
        params = {t["function"]["name"]: set(t["function"]["parameters"]["properties"]) for t in tools}
        for call in parsed.calls:
            assert call.name in params, (family, row["source_id"], call.name, sorted(params))
            assert set(call.arguments) <= params[call.name], (family, call)
        called.setdefault(row["source_id"], []).extend(call.name for call in parsed.calls)
    offered_calls = [n for source, names in called.items() if source.startswith("offer-") for n in names]
    print(f"{family}: {len(rows)} rows; calls {called}; ended {view.ended}; truncated {view.truncated}")
    assert sum(1 for s, names in called.items() if s.startswith("offer-") and names) >= 2, called
    assert len(set(offered_calls)) > 1, called  # the seeded draws pick among the offered tools
    # Downstream of a call: a lane whose call was paired with its cached result was prompted again.
    lanes = lanes_of(rows)
    continued = [turns for (conv, _), turns in lanes.items() if len(turns) == 2]
    assert continued and all(t[0]["source_id"].startswith("continue-") for t in continued), view
    assert all(called[t[0]["source_id"]] == ["get_weather"] for t in continued), called
