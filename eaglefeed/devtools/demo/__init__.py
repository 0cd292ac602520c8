"""Bundled demo assets: a tiny byte-level BPE tokenizer with a chat template and sample prompts."""

from pathlib import Path

from eaglefeed.core.tokenizer import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START

__all__ = ["SAMPLE_PROMPTS", "SPECIAL_TOKENS", "TOKENIZER_DIR"]

_HERE = Path(__file__).resolve().parent

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", THINK_START, THINK_END,
                  TOOL_CALL_START, TOOL_CALL_END, "<tool_response>", "</tool_response>")
"""The demo tokenizer's special tokens; each one's id is its position here (0 is the pad, 2 the eos)."""

# The demo tokenizer (built by scripts/build_demo_tokenizer.py) has 4096 ids: SPECIAL_TOKENS
# first, then the byte symbols and merges. There is no BOS and nothing is added by tokenizer("...").
TOKENIZER_DIR: Path = _HERE / "tokenizer"
"""Folder loadable offline with ``transformers.AutoTokenizer.from_pretrained``."""

SAMPLE_PROMPTS: Path = _HERE / "sample_prompts.jsonl"
"""JSON Lines file of demo prompts in OpenAI and ShareGPT formats."""
