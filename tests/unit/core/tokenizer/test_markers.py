"""The one table of marker spellings, and the two lookups that read it agreeing on every family."""

import json

import pytest
from tokenizers import AddedToken, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast

from eaglefeed.chat.conversation.markers import split_markers_for
from eaglefeed.chat.conversation.split import REASONING, split_output
from eaglefeed.core.tokenizer import markers
from eaglefeed.dataset.markers import flag_markers_for


def test_every_think_spelling_is_a_reasoning_token():
    spellings = {s for pair in markers.THINK_PAIRS for s in pair}
    assert spellings == set(markers.REASONING_TOKENS)
    assert {"<think>", "</think>", "<seed:think>", "</seed:think>", "◁think▷", "◁/think▷"} <= spellings


def test_think_pair_takes_the_first_pair_whose_two_spellings_are_in_the_vocab():
    assert markers.think_pair({"<think>": 1, "</think>": 2, "<seed:think>": 3, "</seed:think>": 4}) == (1, 2)
    assert markers.think_pair({"<think>": 1, "<seed:think>": 3, "</seed:think>": 4}) == (3, 4)
    assert markers.think_pair({"◁think▷": 5, "◁/think▷": 6}) == (5, 6)
    assert markers.think_pair({"<think>": 1, "</seed:think>": 4}) is None


def test_the_tool_call_tags_open_the_tool_call_tokens():
    assert markers.TOOL_CALL_TAGS[:2] == (markers.TOOL_CALL_START, markers.TOOL_CALL_END)
    assert markers.TOOL_CALL_START in markers.TOOL_CALL_TOKENS
    # every format's opening tag flags a tool call, and every tag is in the one tuple the split reads
    for fmt, tags in markers.TOOL_FORMAT_TAGS.items():
        assert set(tags) <= set(markers.TOOL_CALL_TAGS), fmt
        assert tags[0] in markers.TOOL_CALL_TOKENS or fmt == "mistral" and "[TOOL_CALLS]" in tags, fmt
    assert markers.HARMONY_CALL in markers.TOOL_CALL_TOKENS


@pytest.mark.parametrize("pair", markers.THINK_PAIRS, ids=["think", "seed-oss", "kimi"])
def test_what_the_splitter_splits_as_reasoning_the_sink_flags(tmp_path, pair):
    """Both lookups read the table: one tokenizer.json, loaded (converse) and read raw (sink)."""
    tok = Tokenizer(WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens([AddedToken("<|im_end|>", special=True, normalized=False)])
    tok.add_tokens([AddedToken(text, special=False, normalized=False) for text in pair])
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), eos_token="<|im_end|>")
    output = loaded(f"{pair[0]} a {pair[1]} b<|im_end|>", add_special_tokens=False)["input_ids"]

    split = split_output(output, split_markers_for(loaded))
    flags = flag_markers_for(str(tmp_path))
    assert split.has_think and split.ids_of(REASONING) == loaded("a", add_special_tokens=False)["input_ids"]
    assert flags.reasoning is not None and set(flags.reasoning) == {output[0], output[2]}


def test_a_tokenizer_without_tokenizer_json_is_flagged_from_its_added_tokens(remote_tokenizer):
    """Kimi's kind: the think markers are in tokenizer_config.json's added_tokens_decoder."""
    flag_markers_for.cache_clear()
    flags = flag_markers_for(str(remote_tokenizer))
    config = json.loads((remote_tokenizer / "tokenizer_config.json").read_text())
    ids = {tok["content"]: int(key) for key, tok in config["added_tokens_decoder"].items()}
    assert flags.reasoning == (ids["<think>"], ids["</think>"])
    assert flags.tool_call == (ids["<|tool_calls_section_begin|>"],)  # Kimi's calls are flagged too
