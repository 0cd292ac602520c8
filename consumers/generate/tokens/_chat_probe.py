"""The chat half of the tokenizer agreement: a sample conversation rendered by the server's template.

Two models can share a vocabulary and still differ (Qwen2.5 and Qwen3 do): every text probe of
:mod:`eaglefeed.consumers.generate.tokens.agreement` agrees, while the prompts were rendered with a chat
template the served model was never trained on. SGLang 0.5.23 and vLLM both render chat
``messages`` in ``POST /tokenize`` with the served model's own template
(``{"messages", "add_generation_prompt": true, "add_special_tokens": false}``: encoded as
rendered, nothing added), so the worker asks for :data:`SAMPLE_CONVERSATION` and compares the ids
with the prompts' tokenizer rendering it (``transformers``' ``apply_chat_template``, the
producer's own path). A server that cannot render messages (the stand-in, SGLang without a
template manager) answers 4xx: the chat is then not compared, and ``transformers`` is never
loaded in the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

SAMPLE_CONVERSATION: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 3 + 4?"},
    {"role": "assistant", "content": "3 + 4 = 7."},
    {"role": "user", "content": "And 5 × 6? Answer in one line."},
)
"""System, user, assistant, user: the turns whose separators a template decides."""


def chat_body() -> dict[str, Any]:
    """The ``/tokenize`` body asking the server to render :data:`SAMPLE_CONVERSATION` for a reply."""
    return {"messages": [dict(m) for m in SAMPLE_CONVERSATION], "add_generation_prompt": True,
            "add_special_tokens": False}


def render_sample(tokenizer_id: str, *, trust_remote_code: bool) -> list[int] | None:
    """The ids of :data:`SAMPLE_CONVERSATION` with the generation prompt, as the producer renders it.

    Returns None when the tokenizer has no chat template (nothing to compare).
    """
    from eaglefeed.chat.render import PromptRenderer  # transformers: only when a server renders chat
    from eaglefeed.core.errors import ConfigError

    try:
        renderer = PromptRenderer(tokenizer_id, fast=False, trust_remote_code=trust_remote_code)
    except ConfigError:
        return None
    return renderer.render(SAMPLE_CONVERSATION, tools=None, template_kwargs={})


def difference(there: Sequence[int], here: Sequence[int],
               decode: Callable[[list[int]], str] | None) -> str:
    """Where the server's rendering (``there``) and the prompts' (``here``) part, in words."""
    at = next((i for i, (a, b) in enumerate(zip(there, here, strict=False)) if a != b),
              min(len(there), len(here)))

    def piece(ids: Sequence[int]) -> str:
        window = list(ids[at:at + 6])
        if not window:
            return "(the end)"
        return repr(decode(window)) if decode is not None else str(window)

    return (f"the sample conversation renders to {len(there)} ids there and {len(here)} here, first "
            f"differing at id {at}: {piece(there)} there, {piece(here)} here")
