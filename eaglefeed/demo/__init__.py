"""Bundled demo assets: a tiny byte-level BPE tokenizer with a chat template and sample prompts."""

from pathlib import Path

__all__ = ["SAMPLE_PROMPTS", "TOKENIZER_DIR"]

_HERE = Path(__file__).resolve().parent

# The demo tokenizer (built by scripts/build_demo_tokenizer.py) has 4096 ids. Its special
# tokens hold the lowest ids: 0 <|endoftext|> (pad), 1 <|im_start|>, 2 <|im_end|> (eos),
# 3 <think>, 4 </think>, 5 <tool_call>, 6 </tool_call>, 7 <tool_response>,
# 8 </tool_response>. There is no BOS and nothing is added by tokenizer("...").
TOKENIZER_DIR: Path = _HERE / "tokenizer"
"""Folder loadable offline with ``transformers.AutoTokenizer.from_pretrained``."""

SAMPLE_PROMPTS: Path = _HERE / "sample_prompts.jsonl"
"""JSON Lines file of demo prompts in OpenAI and ShareGPT formats."""
