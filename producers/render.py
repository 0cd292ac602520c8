"""The target model's chat template, applied once: messages → exact prompt token ids."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from eaglefeed.errors import InputError


class PromptRenderer:
    """Render conversations with a tokenizer's own chat template and tokenize them once.

    Args:
        tokenizer: a local path or hub id accepted by ``AutoTokenizer.from_pretrained``.
    """

    def __init__(self, tokenizer: str) -> None:
        self.tokenizer_id = tokenizer
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(tokenizer)
        template = self.tokenizer.chat_template
        if not isinstance(template, str) or not template:
            raise InputError("no_chat_template", f"tokenizer {tokenizer!r} has no chat template")
        self.chat_template_hash = hashlib.sha256(template.encode("utf-8")).hexdigest()
        self.tokenizer_hash = _tokenizer_hash(self.tokenizer)
        self.vocab_size = len(self.tokenizer)

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Mapping[str, Any]] | None,
               template_kwargs: Mapping[str, Any]) -> list[int]:
        """Return the prompt ids for ``messages`` with the generation prompt appended.

        Raises:
            InputError: ``template_error`` when the template rejects the conversation.
        """
        try:
            encoded = self.tokenizer.apply_chat_template(
                list(messages), tools=list(tools) if tools else None, add_generation_prompt=True,
                tokenize=True, return_dict=True, **template_kwargs)
        except Exception as exc:  # noqa: BLE001 - any template failure is a bad row, not a crash
            raise InputError("template_error", f"the chat template failed: {exc}") from exc
        return list(encoded["input_ids"])


def _tokenizer_hash(tokenizer: PreTrainedTokenizerBase) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        blob = backend.to_str()
    else:  # slow tokenizers: the vocabulary and added tokens define the mapping
        blob = repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
