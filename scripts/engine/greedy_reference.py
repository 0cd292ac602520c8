"""Greedy token ids from transformers' own generate(): the independent reference for engine tests."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel


def load(model_dir: Path) -> PreTrainedModel:
    """Load the model on CPU in float32, ready for inference.

    Args:
        model_dir: A directory written by ``build_tiny_model.py`` (or any causal LM).

    Returns:
        The model in eval mode.
    """
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.eval()


def greedy(model: PreTrainedModel, input_ids: list[int], max_new_tokens: int,
           stop_token_ids: Iterable[int] = ()) -> list[int]:
    """Generate greedily and return exactly the new ids.

    Generation stops on the model's eos id or any of ``stop_token_ids``, like vLLM does; the id it
    stopped on is the last one returned, as in vLLM's ``token_ids``.

    Args:
        model: The model from :func:`load`.
        input_ids: The prompt's token ids.
        max_new_tokens: Most ids to generate.
        stop_token_ids: Extra ids that end generation.

    Returns:
        The generated ids, without the prompt.
    """
    config = model.generation_config
    eos = [config.eos_token_id] if isinstance(config.eos_token_id, int) else list(config.eos_token_id or [])
    stops = eos + [int(i) for i in stop_token_ids if int(i) not in eos]
    prompt = torch.tensor([input_ids], dtype=torch.long)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=max_new_tokens, min_new_tokens=0, eos_token_id=stops,
                             pad_token_id=config.pad_token_id)
    return [int(i) for i in out[0, len(input_ids):].tolist()]


def run(model: PreTrainedModel, requests: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Answer each request with its greedy output ids.

    Args:
        model: The model from :func:`load`.
        requests: Dicts with ``id``, ``input_ids``, ``max_new_tokens`` and optional ``stop_token_ids``.

    Yields:
        ``{"id": ..., "output_ids": [...]}`` per request, in order.
    """
    for request in requests:
        output_ids = greedy(model, request["input_ids"], int(request["max_new_tokens"]),
                            request.get("stop_token_ids") or ())
        yield {"id": request.get("id"), "output_ids": output_ids}


def read_requests(stream: TextIO) -> Iterator[dict[str, Any]]:
    """Parse JSON lines, skipping blank ones.

    Args:
        stream: Text to read.

    Yields:
        One dict per non-blank line.
    """
    for line in stream:
        if line.strip():
            yield json.loads(line)


def main() -> None:
    """Read requests from a file or stdin and write one JSON line per result to stdout."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", type=Path, help="model directory (config, weights, tokenizer)")
    parser.add_argument("requests", nargs="?", default="-", help="JSON-lines file of requests, or - for stdin")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.model_dir)
    source = sys.stdin if args.requests == "-" else open(args.requests, encoding="utf-8")  # noqa: SIM115
    with source:
        for result in run(model, read_requests(source)):
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
