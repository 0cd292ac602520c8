"""Fixtures for the conversation library: the bundled demo tokenizer (Qwen3-style ChatML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eaglefeed.chat.render import PromptRenderer

DEMO_TOKENIZER = Path(__file__).resolve().parents[4] / "eaglefeed" / "devtools" / "demo" / "tokenizer"

@pytest.fixture(scope="session")
def renderer() -> PromptRenderer:
    """One renderer of the demo tokenizer for the whole session (loading it is not free)."""
    return PromptRenderer(str(DEMO_TOKENIZER))


@pytest.fixture(scope="session")
def encode(renderer: PromptRenderer) -> Any:
    """Text → ids with the demo tokenizer (special tokens in the text become their ids)."""
    def run(text: str) -> list[int]:
        return list(renderer.tokenizer.encode(text, add_special_tokens=False))
    return run


@pytest.fixture(scope="session")
def render_ids(renderer: PromptRenderer) -> Any:
    """The independent re-rendering: ``apply_chat_template`` called here, not through the library."""
    def run(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
            **kwargs: Any) -> list[int]:
        out = renderer.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                     tokenize=True, return_dict=True, **kwargs)
        return list(out["input_ids"])
    return run
