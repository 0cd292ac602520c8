"""The identity check of ``produce``: a renderer's own templates (with and without tools) pass, another
tokenizer or template is refused in one line naming both."""

from __future__ import annotations

import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.identity import PromptIdentity, RendererIdentity, check_identity

OURS = RendererIdentity("qwen", "a" * 64, frozenset({"b" * 64, "c" * 64}))  # plain and tool_use templates


def test_the_renderers_own_prompts_pass_with_either_template_and_an_empty_topic_passes():
    check_identity(PromptIdentity("elsewhere/qwen", "a" * 64, "b" * 64), OURS, topic="t.prompts")
    check_identity(PromptIdentity("qwen", "a" * 64, "c" * 64), OURS, topic="t.prompts")
    check_identity(None, OURS, topic="t.prompts")


@pytest.mark.parametrize(("in_use", "what"), [(PromptIdentity("demo", "d" * 64, "b" * 64), "tokenizer"),
                                              (PromptIdentity("qwen", "a" * 64, "e" * 64), "chat template")])
def test_another_tokenizer_or_template_is_refused_naming_both(in_use, what):
    with pytest.raises(ConfigError) as refused:
        check_identity(in_use, OURS, topic="t.prompts")
    assert str(refused.value) == (
        f"t.prompts holds prompts of another {what}: {in_use.describe()}; this run renders with qwen "
        "(tokenizer aaaaaaaaaaaa…, template bbbbbbbbbbbb…, cccccccccccc…). One topic prefix makes one "
        "dataset of one tokenizer: use another --topic-prefix, or pass --allow-mixed to publish into it "
        "anyway")


def test_another_model_is_refused_and_an_unknown_or_same_named_one_passes():
    ours = RendererIdentity("qwen", "a" * 64, frozenset({"b" * 64}), "Qwen/Qwen3-8B")
    for model in (None, "/models/qwen3-8b/", "Qwen/Qwen3-8B"):
        check_identity(PromptIdentity("qwen", "a" * 64, "b" * 64, model), ours, topic="t.prompts")
    check_identity(PromptIdentity("qwen", "a" * 64, "b" * 64, "other"), OURS, topic="t.prompts")  # OURS: none
    llama = PromptIdentity("qwen", "a" * 64, "b" * 64, "/models/Llama-3.1-8B")
    with pytest.raises(ConfigError) as refused:
        check_identity(llama, ours, topic="t.prompts")
    assert str(refused.value).startswith(
        "t.prompts holds prompts of another model: qwen (tokenizer aaaaaaaaaaaa…, template bbbbbbbbbbbb…, "
        "model /models/Llama-3.1-8B); this run renders with qwen (tokenizer aaaaaaaaaaaa…, template "
        "bbbbbbbbbbbb…, model Qwen/Qwen3-8B). One topic prefix makes one dataset of one model:")
