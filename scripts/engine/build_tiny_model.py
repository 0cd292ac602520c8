"""Build a tiny, randomly initialised, byte-reproducible Llama beside the demo tokenizer (engine venv)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

TOKENIZER_DIR = Path(__file__).resolve().parents[2] / "eaglefeed" / "devtools" / "demo" / "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
DEFAULT_SEED = 20261201
DEFAULT_LAYERS = 2


def sha256_of(path: Path) -> str:
    """Return the hex sha256 of a file.

    Args:
        path: The file to hash.

    Returns:
        The lowercase hex digest.
    """
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build(out_dir: Path, seed: int = DEFAULT_SEED, tokenizer_dir: Path = TOKENIZER_DIR,
          layers: int = DEFAULT_LAYERS) -> str:
    """Build the model into out_dir with a copy of the tokenizer files.

    The special-token ids come from the tokenizer itself, so vLLM and transformers stop on the
    same end-of-sequence id: eos = ``eos_token`` (``<|im_end|>``), pad = ``pad_token``
    (``<|endoftext|>``), and no bos (the demo tokenizer has none and adds none).

    Args:
        out_dir: Directory to write (created if missing; existing files are overwritten).
        seed: Seed of the weight initialisation.
        tokenizer_dir: Directory holding the demo tokenizer files.
        layers: Number of decoder layers (the default 2 is the model the engine tests' greedy
            outputs come from; other counts make other models from the same seed).

    Returns:
        The sha256 of the written model.safetensors.
    """
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out_dir / name)
    return sha256_of(out_dir / "model.safetensors")


def main() -> None:
    """Parse arguments, build the model and print the weights' sha256."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path, help="directory to write the model and tokenizer into")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight initialisation seed")
    parser.add_argument("--tokenizer-dir", type=Path, default=TOKENIZER_DIR, help="demo tokenizer files")
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS, help="number of decoder layers")
    args = parser.parse_args()
    if args.layers < 1:
        parser.error("--layers must be at least 1")
    digest = build(args.out_dir, args.seed, args.tokenizer_dir, args.layers)
    print(f"model.safetensors sha256 {digest}")


if __name__ == "__main__":
    main()
