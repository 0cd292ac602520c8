"""The formats' edges: what auto picks, malformed calls refused, Harmony's reasoning flagged alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from eaglefeed.chat.conversation.markers import split_markers_for
from eaglefeed.chat.conversation.split import split_output
from eaglefeed.chat.toolcalls import ToolCall, ToolCallError, detect_format, parse_content
from eaglefeed.chat.toolcalls.detect import detect_from
from eaglefeed.dataset.markers import flag_markers_for
from eaglefeed.dataset.shards import _sequence_hits
from tests.toolcall_tokenizers import FORMAT_NAMES


def _parse(tok: Any, fmt: str, text: str) -> Any:
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    markers = split_markers_for(tok)
    return parse_content(ids, fmt, tags=markers.vocab,
                         decode=lambda i: str(tok.decode(i, skip_special_tokens=False)))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_auto_names_each_family_from_its_tokenizer(fmt, family_tokenizers):
    assert detect_format(family_tokenizers[fmt]).name == fmt


def test_auto_cannot_tell_deepseek_versions_without_a_template():
    found = detect_from({"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"}, "")
    assert found.name is None and "V3.1" in found.why


def test_auto_cannot_tell_a_template_that_renders_tools_without_known_markers():
    assert detect_from(set(), "{% for t in tools %}{{ t }}{% endfor %}").name is None
    assert detect_from(set(), "{{ messages }}").name == "none"


@pytest.mark.parametrize(("fmt", "text", "error"), [
    ("hermes", '<tool_call>{"name": "a"}', "never closed"),
    ("kimi_k2", '<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}',
     "never reaches"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>a<|tool_call_argument_begin|>{}"
                "<|tool_call_end|><|tool_calls_section_end|>", "NAME:INDEX"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n{}"
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "fence"),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>[1]<｜tool▁call▁end｜>"
                     "<｜tool▁calls▁end｜>", "JSON object"),
    ("glm45", "<tool_call>a\n<arg_key>k</arg_key>\n</tool_call>", "no <arg_value>"),
    ("llama3_json", '<|python_tag|>{"name": "a", "parameters": {}} and then', "separated"),
    ("mistral", "[TOOL_CALLS]a{}", r"no \[ARGS\]"),
    ("gpt_oss", "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{}", "not a function"),
])
def test_a_malformed_call_is_refused(fmt, text, error, family_tokenizers):
    with pytest.raises(ToolCallError, match=error):
        _parse(family_tokenizers[fmt], fmt, text)


def test_llama_json_text_that_is_no_call_stays_the_answer(family_tokenizers):
    parsed = _parse(family_tokenizers["llama3_json"], "llama3_json", '{"answer": 42} is the shape')
    assert (parsed.calls, parsed.text) == ([], '{"answer": 42} is the shape')


def test_mistral_before_v11_reads_one_array_of_calls(family_tokenizers):
    parsed = _parse(family_tokenizers["mistral"], "mistral",
                    'ok[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": "{}"}]')
    assert parsed.calls == [ToolCall("a", {"x": 1}), ToolCall("b", {})] and parsed.text == "ok"


def test_a_quoted_tag_in_text_is_text_when_tags_are_tokens(family_tokenizers):
    tok = family_tokenizers["kimi_k2"]
    tag_id = tok.convert_tokens_to_ids("<|tool_call_begin|>")
    quoted = [i for i in tok("say <|tool_call_begin|>", add_special_tokens=False, split_special_tokens=True)
              ["input_ids"]]
    assert tag_id not in quoted
    markers = split_markers_for(tok)
    parsed = parse_content(quoted, "kimi_k2", tags=markers.vocab,
                           decode=lambda i: str(tok.decode(i, skip_special_tokens=False)))
    assert parsed.calls == [] and parsed.text == "say <|tool_call_begin|>"


def test_harmony_reasoning_is_flagged_where_the_split_finds_it(family_tokenizers, tmp_path):
    from tests.toolcall_tokenizers import write_family_tokenizer

    folder = write_family_tokenizer("gpt_oss", tmp_path / "gpt_oss")
    tok = family_tokenizers["gpt_oss"]
    flags = flag_markers_for(str(folder))
    markers = split_markers_for(tok)
    assert flags.reasoning_sequence is not None and flags.reasoning_sequence == markers.channel_open
    outputs = ["<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>hi"
               "<|return|>",
               "<|channel|>final<|message|>an analysis of it<|return|>",
               "<|channel|>commentary<|message|>analysis<|end|>"]
    for text in outputs:
        ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], np.int32)
        flagged = bool(_sequence_hits(ids, np.ones(len(ids), np.int8), flags.reasoning_sequence).any())
        assert flagged == split_output(ids.tolist(), markers).has_think == text.startswith(
            "<|channel|>analysis")


def test_auto_names_kimi_for_the_remote_code_tokenizer(remote_tokenizer):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(remote_tokenizer), trust_remote_code=True)
    assert detect_format(tok).name == "kimi_k2"
