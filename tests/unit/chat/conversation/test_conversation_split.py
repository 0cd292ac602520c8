"""The output splitter and the tool-call parsers: examples and properties (hypothesis)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.chat.conversation.markers import SplitMarkers, split_markers_for
from eaglefeed.chat.conversation.split import CONTENT, REASONING, STOP, THINK_CLOSE, THINK_OPEN, split_output
from eaglefeed.chat.conversation.toolcalls import ToolCall, ToolCallError, call_from_json, parse_content
from eaglefeed.core.tokenizer.markers import THINK_PAIRS

# Small alphabets so that markers, stops and tags occur often.
OPEN, CLOSE, EOS, CALL_OPEN, CALL_CLOSE = 3, 4, 2, 5, 6
MARKERS = SplitMarkers(think_open=OPEN, think_close=CLOSE, special=frozenset({0, 1, EOS}),
                       vocab={"<tool_call>": CALL_OPEN, "</tool_call>": CALL_CLOSE})
NO_THINK = SplitMarkers(think_open=None, think_close=None, special=frozenset({EOS}), vocab={})
ids_lists = st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 100, 101, 102]), max_size=30)


def test_the_demo_tokenizer_markers_are_looked_up_by_id(renderer):
    markers = split_markers_for(renderer.tokenizer)
    vocab = renderer.tokenizer.get_vocab()
    assert (markers.think_open, markers.think_close) == (vocab["<think>"], vocab["</think>"])
    assert vocab["<|im_end|>"] in markers.special
    assert markers.single("<tool_call>") == vocab["<tool_call>"]
    assert split_markers_for(renderer.tokenizer) is markers  # cached


class _Tokenizer:
    """Just what the lookup reads of a loaded tokenizer: its vocab, added tokens and special ids."""

    def __init__(self, spellings: tuple[str, ...]) -> None:
        self.vocab = {text: 10 + i for i, text in enumerate(spellings)}
        self.all_special_ids = [EOS, *self.vocab.values()]

    def get_vocab(self) -> dict[str, int]:
        return {"a": 100, **self.vocab}

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self.vocab)


@pytest.mark.parametrize("pair", THINK_PAIRS)
def test_every_think_family_of_the_table_splits_the_output(pair):
    tokenizer = _Tokenizer(pair)
    markers = split_markers_for(tokenizer)
    assert (markers.think_open, markers.think_close) == (10, 11)
    assert markers.special == {EOS}  # think markers are no stop
    split = split_output([10, 100, 11, 100, EOS], markers)
    assert (split.ids_of(REASONING), split.ids_of(CONTENT)) == ([100], [100])


def test_the_first_whole_pair_of_the_table_wins():
    seed, kimi = THINK_PAIRS[1], THINK_PAIRS[2]
    markers = split_markers_for(_Tokenizer((kimi[0], *seed, kimi[1])))
    assert (markers.think_open, markers.think_close) == (11, 12)  # Seed-OSS is listed before Kimi
    assert split_markers_for(_Tokenizer((seed[0], kimi[1]))).think_open is None  # no whole pair


def test_a_think_block_then_content_then_the_stop():
    split = split_output([OPEN, 100, 101, CLOSE, 102, EOS], MARKERS)
    assert [(s.kind, s.ids) for s in split.spans] == [
        (THINK_OPEN, [OPEN]), (REASONING, [100, 101]), (THINK_CLOSE, [CLOSE]), (CONTENT, [102]),
        (STOP, [EOS])]
    assert split.has_think


def test_only_the_closing_marker_means_the_prompt_opened_the_think_block():
    split = split_output([100, CLOSE, 101], MARKERS)
    assert (split.ids_of(REASONING), split.ids_of(CONTENT), split.ids_of(STOP)) == ([100], [101], [])


def test_an_unclosed_think_block_is_all_reasoning():
    split = split_output([100, OPEN, 101, EOS], MARKERS)
    assert (split.ids_of(CONTENT), split.ids_of(REASONING)) == ([100], [101])


def test_without_think_markers_everything_is_content():
    split = split_output([OPEN, 100, CLOSE, EOS], NO_THINK)
    assert (split.ids_of(CONTENT), split.ids_of(STOP), split.has_think) == ([OPEN, 100, CLOSE], [EOS], False)


def test_a_quoted_marker_in_text_does_not_split(renderer, encode):
    # "</think>" spelled with ordinary tokens is text, not the marker token.
    markers = split_markers_for(renderer.tokenizer)
    quoted = encode("<") + encode("/think>")
    split = split_output(encode("<think>") + quoted + encode("</think>ok<|im_end|>"), markers)
    assert split.ids_of(REASONING) == quoted


@given(ids_lists)
def test_split_never_crashes_and_the_spans_rejoin_to_the_output(ids):
    for markers in (MARKERS, NO_THINK):
        split = split_output(ids, markers)
        assert split.joined() == ids
        assert all(span.ids for span in split.spans)
        kinds = [s.kind for s in split.spans]
        assert kinds.count(THINK_CLOSE) <= 1 and kinds.count(STOP) <= 1
        assert STOP not in kinds[:-1]
        # Reasoning never holds the closing marker; everything after it is content (or the stop).
        assert CLOSE not in split.ids_of(REASONING) or markers is NO_THINK
        if THINK_CLOSE in kinds:
            after = kinds[kinds.index(THINK_CLOSE) + 1:]
            assert set(after) <= {CONTENT, STOP}


def _decode(ids: list[int]) -> str:
    names = {CALL_OPEN: "<tool_call>", CALL_CLOSE: "</tool_call>"}
    return "".join(names.get(i, chr(0x61 + i % 26)) for i in ids)


@given(ids_lists)
def test_hermes_by_id_never_crashes_and_its_pieces_rejoin(ids):
    try:
        parsed = parse_content(ids, MARKERS, _decode, "hermes")
    except ToolCallError:
        return
    assert [i for _, piece in parsed.pieces for i in piece] == ids
    assert len(parsed.calls) == sum(1 for kind, _ in parsed.pieces if kind == "open")


@given(st.text(max_size=60))
def test_hermes_on_text_never_crashes(text):
    try:
        parsed = parse_content([0], NO_THINK, lambda _ids: text, "hermes")
    except ToolCallError:
        return
    assert "<tool_call>" not in parsed.text


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6)
                           | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                                     max_size=12),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
calls = st.lists(st.builds(ToolCall, name=names, arguments=st.dictionaries(names, json_values, max_size=3)),
                 min_size=1, max_size=3)


@given(calls, st.text(alphabet="abc XYZ.,\n", max_size=20))
def test_hermes_reads_back_the_calls_the_template_writes(renderer, encode, generated, text):
    # The calls as a Qwen-style model writes them, tokenized by the demo tokenizer.
    body = "".join(f'\n<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": '
                   f'{json.dumps(c.arguments, ensure_ascii=False)}}}\n</tool_call>' for c in generated)
    markers = split_markers_for(renderer.tokenizer)

    def decode(ids: list[int]) -> str:
        return str(renderer.tokenizer.decode(ids, skip_special_tokens=False))

    for fmt_markers in (markers, dataclasses.replace(markers, vocab={})):
        parsed = parse_content(encode(text + body), fmt_markers, decode, "hermes")
        assert parsed.calls == generated
        assert parsed.text == text.strip()


@pytest.mark.parametrize(("body", "call"), [
    ('{"name": "f", "arguments": {"a": 1}}', ToolCall("f", {"a": 1})),
    ('{"name": "f", "arguments": "{\\"a\\": 1}"}', ToolCall("f", {"a": 1})),
    ('{"name": "f"}', ToolCall("f", {})),
    ('{"name": "f", "parameters": {"b": 2}}', ToolCall("f", {"b": 2})),
])
def test_call_bodies(body, call):
    assert call_from_json(body) == call


@pytest.mark.parametrize("body", ['{"name": ""}', '{"name": 3}', '"f"', '{"name": "f", "arguments": [1]}',
                                  '{"name": "f", "arguments": "not json"}', "{", ""])
def test_bad_call_bodies(body):
    with pytest.raises(ToolCallError):
        call_from_json(body)


def test_the_none_format_keeps_tags_as_text():
    parsed = parse_content([100, CALL_OPEN, 101, CALL_CLOSE], MARKERS, _decode, "none")
    assert parsed.calls == [] and parsed.text == _decode([100, CALL_OPEN, 101, CALL_CLOSE])
