"""Remote-code tokenizers (Kimi's kind): refused in one line naming the flag, never a prompt, or loaded."""

from __future__ import annotations

import builtins
import json

import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer.remote_code import (
    RemoteCodeError,
    load_tokenizer,
    remote_code_class,
    remote_code_files,
    runs_remote_code,
)
from eaglefeed.devtools.demo import TOKENIZER_DIR


@pytest.fixture(autouse=True)
def no_prompt(monkeypatch):
    """transformers must never ask [y/N]: any input() fails the test."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("transformers prompted interactively")

    monkeypatch.setattr(builtins, "input", refuse)


def test_the_auto_map_class_is_found(remote_tokenizer, tmp_path):
    assert remote_code_class(str(remote_tokenizer)) == "tokenization_kimi.TikTokenTokenizer"
    assert remote_code_class(str(TOKENIZER_DIR)) is None
    assert remote_code_class(str(tmp_path / "nowhere")) is None
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "tokenizer_config.json").write_text(json.dumps({"auto_map": ["mod.Slow", "mod.Fast"]}))
    assert remote_code_class(str(legacy)) == "mod.Fast"  # transformers prefers the fast class too


def test_without_the_flag_a_remote_code_tokenizer_is_one_line_naming_the_flag(remote_tokenizer):
    with pytest.raises(RemoteCodeError) as exc:
        load_tokenizer(str(remote_tokenizer), trust_remote_code=False, hint=" (or else)")
    message = str(exc.value)
    assert isinstance(exc.value, ConfigError)
    assert "\n" not in message and "--trust-remote-code" in message
    assert "EAGLEFEED_TRUST_REMOTE_CODE" in message
    assert "tokenization_kimi.TikTokenTokenizer" in message and message.endswith(" (or else)")


def test_transformers_own_refusal_becomes_the_same_line(monkeypatch, tmp_path):
    import transformers

    def refuse(name, **kwargs):
        assert kwargs["trust_remote_code"] is False  # always a bool: None would prompt
        raise ValueError("The repository x contains custom code ...\nPlease pass `trust_remote_code=True`")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    with pytest.raises(RemoteCodeError, match=r"^tokenizer 'org/model' runs its own Python code: pass "):
        load_tokenizer("org/model", trust_remote_code=False)


def test_with_the_flag_it_loads_and_renders(remote_tokenizer):
    tok = load_tokenizer(str(remote_tokenizer), trust_remote_code=True)
    assert runs_remote_code(tok) and not runs_remote_code(load_tokenizer(str(TOKENIZER_DIR),
                                                                         trust_remote_code=False))
    assert len(tok) == 256 + 39 + 16 and tok.convert_tokens_to_ids("<think>") == 256 + 39 + 7
    ids = tok.apply_chat_template([{"role": "user", "content": "hello wörld"}], add_generation_prompt=True,
                                  tokenize=True, return_dict=True)["input_ids"]
    assert tok.decode(ids) == "<|im_user|>user<|im_middle|>hello wörld<|im_end|>" \
                              "<|im_assistant|>assistant<|im_middle|><think>"


def test_the_code_files_follow_relative_imports(remote_tokenizer):
    assert remote_code_files(str(remote_tokenizer)) == ("kimi_bytes.py", "tokenization_kimi.py")
    assert remote_code_files(str(TOKENIZER_DIR)) == ()
