"""The renderer on a remote-code tokenizer of Kimi-K2's shape: exact ids, a hash over its defining files."""

from __future__ import annotations

import json
import shutil

import pytest

from eaglefeed.chat.prompts import last_turn, parse_row
from eaglefeed.chat.render import PromptRenderer, tokenizer_files_hash
from eaglefeed.core.tokenizer.remote_code import RemoteCodeError, load_tokenizer
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR

DEMO_HASH = "001b5ccd90a0bfa90c0e08bedea4b6d6a0beb320e430b9b084e35e9614bec9c7"
"""The demo tokenizer's hash before remote-code tokenizers were hashed: tokenizer.json ones keep theirs."""


def test_a_tokenizer_json_tokenizer_keeps_its_hash(tmp_path):
    assert PromptRenderer(str(TOKENIZER_DIR)).tokenizer_hash == DEMO_HASH
    assert tokenizer_files_hash(str(TOKENIZER_DIR), b"") == DEMO_HASH
    copy = shutil.copytree(TOKENIZER_DIR, tmp_path / "demo")
    (copy / "helpers.py").write_text("x = 1\n")  # a stray .py file defines nothing here
    assert PromptRenderer(str(copy), trust_remote_code=True).tokenizer_hash == DEMO_HASH


def test_without_the_flag_the_renderer_refuses_in_one_line(remote_tokenizer):
    with pytest.raises(RemoteCodeError) as exc:
        PromptRenderer(str(remote_tokenizer))
    assert "\n" not in str(exc.value) and "pass --trust-remote-code" in str(exc.value)


def test_every_sample_prompt_renders_exactly_like_the_tokenizers_own_template(remote_tokenizer):
    renderer = PromptRenderer(str(remote_tokenizer), trust_remote_code=True)
    tok = load_tokenizer(str(remote_tokenizer), trust_remote_code=True)
    rows = [json.loads(line) for line in SAMPLE_PROMPTS.read_text().splitlines()]
    checked = 0
    for n, row in enumerate(rows):
        conv = parse_row(row, default_id=str(n))
        turn = last_turn(conv)
        expected = tok.apply_chat_template(turn.messages, tools=conv.tools, add_generation_prompt=True,
                                           tokenize=True, return_dict=True, **conv.template_kwargs)
        assert renderer.render(turn.messages, tools=conv.tools,
                               template_kwargs=conv.template_kwargs) == expected["input_ids"]
        checked += 1
    assert checked == len(rows) > 200 and renderer.vocab_size == len(tok) == 311


@pytest.mark.parametrize("name", ["tiktoken.model", "tokenization_kimi.py", "kimi_bytes.py",
                                  "tokenizer_config.json"])
def test_the_hash_covers_every_file_that_defines_the_tokenizer(remote_tokenizer, name):
    before = PromptRenderer(str(remote_tokenizer), trust_remote_code=True).tokenizer_hash
    (remote_tokenizer / "README.md").write_text("not part of the tokenizer\n")
    assert PromptRenderer(str(remote_tokenizer), trust_remote_code=True).tokenizer_hash == before
    path = remote_tokenizer / name
    path.write_bytes(path.read_bytes() + (b"\n" if name != "tokenizer_config.json" else b" "))
    assert PromptRenderer(str(remote_tokenizer), trust_remote_code=True).tokenizer_hash != before
