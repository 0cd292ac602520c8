"""The model's context, from its ``config.json``: say at start-up when prompt + output cannot fit it."""

from __future__ import annotations

import json
from pathlib import Path

from eaglefeed.core.config import PromptSettings
from eaglefeed.core.tokenizer.files import tokenizer_file

MODEL_CONFIG = "config.json"


def context_warning(prompts: PromptSettings) -> str | None:
    """The start-up warning when ``--max-prompt-tokens`` + ``max_new_tokens`` exceeds the model's context.

    The context is ``max_position_embeddings`` of the ``config.json`` beside the tokenizer (its
    directory, or the Hugging Face cache for a hub id: nothing is fetched); None when that is
    unknown or the two fit.
    """
    found = max_position_embeddings(prompts.tokenizer)
    if found is None:
        return None
    context, path = found
    longest, new = prompts.max_prompt_tokens, prompts.sampling.max_new_tokens
    if longest + new <= context:
        return None
    fits = context - new
    if fits < 1:  # no prompt fits at all: the output asked for is the problem, not the prompts
        return (f"max_new_tokens {new} is not below the model's max_position_embeddings {context} ({path}): "
                "no prompt can be generated, and the workers dead-letter every one as context_exceeded; "
                f"ask for fewer new tokens (--max-new-tokens, under {context})")
    return (f"--max-prompt-tokens {longest} + max_new_tokens {new} = {longest + new} exceeds the model's "
            f"max_position_embeddings {context} ({path}): a prompt over {fits} tokens cannot be "
            f"generated, and the workers dead-letter it as context_exceeded; --max-prompt-tokens {fits} "
            "refuses it here instead (prompt_too_long)")


def max_position_embeddings(tokenizer: str) -> tuple[int, Path] | None:
    """The model's ``max_position_embeddings`` (its ``text_config``'s for a multimodal one) and the file."""
    path = tokenizer_file(tokenizer, MODEL_CONFIG)
    if path is None:
        return None
    try:
        config = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # a config we cannot read says nothing of the context: no warning
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        value = section.get("max_position_embeddings") if isinstance(section, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, path
    return None
