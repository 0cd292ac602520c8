"""Model names: a prompt's and a server's are one model when their last path components are."""

from __future__ import annotations

import pytest

from eaglefeed.core.tokenizer import model_name, same_model, tokenizer_model
from eaglefeed.devtools.demo import TOKENIZER_DIR


@pytest.mark.parametrize(("model", "name"), [
    ("Qwen/Qwen3-8B", "qwen3-8b"), ("/models/Qwen3-8B/", "qwen3-8b"), ("qwen3-8b", "qwen3-8b"),
    ("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/0123abcd", "qwen3-8b"),
    ("C:\\models\\Qwen3-8B", "qwen3-8b"), ("", "")])
def test_a_model_is_named_by_its_last_path_component(model, name):
    assert model_name(model) == name


def test_unknown_models_match_any_and_others_do_not():
    assert same_model("Qwen/Qwen3-8B", "/models/qwen3-8b")
    assert same_model(None, "/models/Llama-3.1-8B") and same_model("Qwen/Qwen3-8B", "")
    assert not same_model("Qwen/Qwen3-8B", "/models/Qwen3-8B-FP8")
    assert not same_model("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B")


def test_a_tokenizer_names_its_model_when_it_is_a_hub_id_or_a_model_directory(tmp_path):
    assert tokenizer_model("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert tokenizer_model(str(TOKENIZER_DIR)) is None  # a tokenizer alone says nothing of the model
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    (model / "config.json").write_text('{"_name_or_path": "base/model"}')
    assert tokenizer_model(str(model)) == str(model)  # its directory, not the config's base name
    assert tokenizer_model(str(tmp_path / "missing")) is None and tokenizer_model("./tok") is None
