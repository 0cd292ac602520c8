"""Every tool-call format end to end: the real broker, the stand-in writing that format, both history modes.

Per format, the family's tokenizer (tests/toolcall_tokenizers.py) serves the stand-in
(``--tool-call-format``) and renders the prompts; ``produce --tool-format auto`` picks the format
from it and the converse stage parses the turns with it. The conversation has two turns of two
parallel calls (tests/conversation_rows.py). Every row's prompt is checked against this file's own
reading of the stand-in's output (a regex per format, not eaglefeed's parser) re-rendered with the
tokenizer's apply_chat_template (rerender), or against the previous prompt + output (tokens).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tests.conversation_rows import parallel_tool_row
from tests.integration.conversation_support import Pipeline, lanes_of, read_rows, rerender_walk
from tests.toolcall_tokenizers import FORMAT_NAMES, write_family_tokenizer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STANDIN = ("--latency-model", "none", "--think-fraction", "0.5", "--length-fraction", "0",
           "--output-len-mean", "24", "--output-len-sigma", "0.3", "--tool-call-fraction", "1",
           "--parallel-tool-call-fraction", "1")
# What the published formats allow in tokens mode (tests/unit/devtools/standin/test_standin_tool_formats.py).
TOKENS_END = {"gpt_oss": ("not_prefix_stable", 2)}

# The stand-in's layout of each format's calls, read here by regex: (name, JSON arguments) per call.
CALL_RE = {
    "hermes": r"<tool_call>\n(?P<body>.*?)\n</tool_call>",
    "kimi_k2": r"<\|tool_call_begin\|>functions\.(?P<name>\w+):\d+<\|tool_call_argument_begin\|>(?P<args>.*?)"
               r"<\|tool_call_end\|>",
    "deepseek_v3": r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(?P<name>\w+)\n```json\n(?P<args>.*?)\n```"
                   r"<｜tool▁call▁end｜>",
    "deepseek_v31": r"<｜tool▁call▁begin｜>(?P<name>\w+)<｜tool▁sep｜>(?P<args>.*?)<｜tool▁call▁end｜>",
    "glm45": r"<tool_call>(?P<name>\w+)\n(?P<kv>.*?)</tool_call>",
    "llama3_json": r'\{"name": "(?P<name>\w+)", "parameters": (?P<args>\{[^{}]*\})\}',
    "mistral": r"\[TOOL_CALLS\](?P<name>\w+)\[ARGS\](?P<args>\{[^{}]*\})",
    "gpt_oss": r"to=functions\.(?P<name>\w+) <\|constrain\|>json<\|message\|>(?P<args>.*?)<\|call\|>",
}
REASONING_RE = {"gpt_oss": r"<\|channel\|>analysis<\|message\|>(.*?)<\|end\|>"}
THINK_RE = r"<think>(.*?)</think>"


def _calls(fmt: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for m in re.finditer(CALL_RE[fmt], text, re.S):
        if fmt == "hermes":
            body = json.loads(m["body"])
            out.append((body["name"], body["arguments"]))
        elif fmt == "glm45":
            pairs = re.findall(r"<arg_key>(.*?)</arg_key>\n<arg_value>(.*?)</arg_value>", m["kv"], re.S)
            out.append((m["name"], dict(pairs)))
        else:
            out.append((m["name"], json.loads(m["args"])))
    return out


class FormatRerendering:
    """The prompts a format's rows must hold, from the source row and the rows' own output ids."""

    def __init__(self, fmt: str, folder: Path) -> None:
        self.fmt = fmt
        self.tok = AutoTokenizer.from_pretrained(str(folder))
        self.stops = {self.tok.decode([i]) for i in self.tok.all_special_ids}

    def ids(self, source: dict[str, Any], messages: list[dict[str, Any]]) -> list[int]:
        text = self.tok.apply_chat_template(messages, tools=source.get("tools"), add_generation_prompt=True,
                                            tokenize=False)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def assistant(self, row: dict[str, Any], after: list[dict[str, Any]]) -> dict[str, Any]:
        text = self.tok.decode(row["input_ids"][row["prompt_len"]:], skip_special_tokens=False)
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        found = re.search(REASONING_RE.get(self.fmt, THINK_RE), text, re.S)
        rest = text
        if found:
            message["reasoning_content"] = found[1].strip()
            rest = text[found.end():]
        calls = _calls(self.fmt, rest)
        if calls:
            results = [m for m in after if m["role"] == "tool"]
            message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a},
                                      "id": results[k]["tool_call_id"]} for k, (n, a) in enumerate(calls)]
        else:
            for stop in self.stops:
                rest = rest.removesuffix(stop)
            rest = rest.removeprefix("<|start|>assistant").removeprefix("<|channel|>final<|message|>")
            message["content"] = rest.strip()
        return message

    def rerender_prompts(self, source: dict[str, Any], turns: list[dict[str, Any]]) -> list[list[int]]:
        return rerender_walk(source, turns, ids=self.ids, assistant=self.assistant)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_parallel_call_conversation_in_every_format(fmt, kafka_config, standin_factory, tmp_path):
    folder = write_family_tokenizer(fmt, tmp_path / f"tokenizer-{fmt}")
    source = parallel_tool_row(f"weather-{fmt}")
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text(json.dumps(source, ensure_ascii=False) + "\n", encoding="utf-8")
    url = standin_factory("--tokenizer", str(folder), "--tool-call-format", fmt, *STANDIN)
    pipeline = Pipeline(kafka_config, url, tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        for mode in ("rerender", "tokens"):
            pipeline.produce(inputs, mode=mode, samples=1, tokenizer=folder)
        view = pipeline.wait_ended(lanes=2)
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    reason, tokens_turns = TOKENS_END.get(fmt, ("user_turns_done", 4))
    assert view.truncated.get("tool_call_unparsable", 0) == 0 and view.in_progress == 0, view
    rows = read_rows(tmp_path / "dataset")
    print(f"{fmt}: {len(rows)} rows regenerated; ended {view.ended}; truncated {view.truncated}")
    by_mode = {mode: [t for t in lanes_of(rows).values() if t[0]["history_mode"] == mode]
               for mode in ("rerender", "tokens")}
    [rerender], [tokens] = by_mode["rerender"], by_mode["tokens"]
    assert len(rerender) == 4 and len(tokens) == tokens_turns, view
    expected = FormatRerendering(fmt, folder).rerender_prompts(source, rerender)
    for row, prompt in zip(rerender, expected, strict=True):
        assert list(row["input_ids"][:row["prompt_len"]]) == prompt, (fmt, row["turn_index"])
    for before, after in zip(tokens, tokens[1:], strict=False):
        prefix = list(after["input_ids"][:before["seq_len"]])
        assert prefix == list(before["input_ids"]), (fmt, after["turn_index"])
    tok = AutoTokenizer.from_pretrained(str(folder))
    for turns in (rerender, tokens):
        outputs = [tok.decode(r["input_ids"][r["prompt_len"]:], skip_special_tokens=False) for r in turns]
        # both parallel calls of turns 0 and 2 were read and paired (the lane went on past them)
        assert [len(_calls(fmt, text)) for text in outputs] == [2, 0, 2, 0][:len(turns)], fmt
        # has_tool_call looks for a marker id: Llama's JSON calls (without <|python_tag|>) have none
        flagged = [fmt != "llama3_json" and k in (0, 2) for k in range(len(turns))]
        assert [r["has_tool_call"] for r in turns] == flagged, fmt
    ended = {"complete": 1 + (reason == "user_turns_done")}
    if reason != "user_turns_done":
        ended["truncated"] = 1
        assert view.truncated == {reason: 1}, view
    assert view.ended == ended, view
