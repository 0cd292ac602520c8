import json

from eaglefeed.core.config import PromptSettings, SamplingDefaults
from eaglefeed.producers.context import context_warning


def settings(tmp_path, *, context: int, new: int, longest: int = 32768) -> PromptSettings:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    (tmp_path / "tokenizer.json").write_text("{}")
    return PromptSettings(tokenizer=str(tmp_path), max_prompt_tokens=longest,
                          sampling=SamplingDefaults(max_new_tokens=new))


def test_a_prompt_budget_over_the_context_names_the_prompt_length_that_fits(tmp_path):
    warning = context_warning(settings(tmp_path, context=8192, new=2048))
    assert warning is not None and "--max-prompt-tokens 6144 refuses it here" in warning


def test_an_output_as_long_as_the_context_asks_for_fewer_new_tokens_not_a_zero_prompt(tmp_path):
    # Trip 7 seen again: max_new_tokens 4096 on a 512-position model advised --max-prompt-tokens 0.
    warning = context_warning(settings(tmp_path, context=512, new=4096))
    assert warning is not None
    assert "--max-prompt-tokens 0" not in warning and "over 0 tokens" not in warning
    assert "max_new_tokens 4096 is not below the model's max_position_embeddings 512" in warning
    assert "--max-new-tokens, under 512" in warning


def test_what_fits_says_nothing(tmp_path):
    assert context_warning(settings(tmp_path, context=8192, new=256, longest=4096)) is None
