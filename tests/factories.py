"""Test factories: PromptRecords and GenerationRecords as dicts (and encoded), shared by every test tier."""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import PROMPT


def prompt_record(*, prompt_id: str, input_ids: list[int], samples: int = 1, max_new_tokens: int = 8,
                  seed: int = 1, source_row: str | None = None, tokenizer: str = "tok",
                  created_at: int = 0) -> dict[str, Any]:
    """A valid PromptRecord (turn 0 of source ``test``) with the test defaults for everything else."""
    return {
        "prompt_id": prompt_id, "source": "test",
        "source_row": prompt_id if source_row is None else source_row, "turn_index": 0,
        "input_ids": input_ids, "num_samples": samples,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.7, "top_p": 0.95,
                            "top_k": 20, "min_p": 0.0, "stop_token_ids": [], "seed": seed},
        "chat_template_kwargs": "{}", "tokenizer_id": tokenizer, "tokenizer_hash": "t",
        "chat_template_hash": "c", "created_at": created_at,
    }


def prompt(pid: str, *, samples: int = 1) -> bytes:
    """An encoded PromptRecord whose prompt id is ``pid`` (three input ids, eight new tokens)."""
    return PROMPT.encode(prompt_record(prompt_id=pid, input_ids=[5, 6, 7], samples=samples))


def make_prompt(i: int, *, samples: int = 1, max_new_tokens: int = 48, length: int | None = None,
                tokenizer: str = str(TOKENIZER_DIR)) -> dict[str, Any]:
    """Synthetic prompt ``i``: seeded random ids (``length`` of them, else 8 to 39), the demo tokenizer."""
    rng = random.Random(i)
    ids = [rng.randrange(9, 4096) for _ in range(length or rng.randrange(8, 40))]
    return prompt_record(prompt_id=hashlib.sha256(f"p{i}".encode()).hexdigest()[:24], input_ids=ids,
                         samples=samples, max_new_tokens=max_new_tokens, seed=i, source_row=str(i),
                         tokenizer=tokenizer, created_at=int(time.time() * 1000))


def generation_record(*, id: str, prompt_id: str, prompt_ids: list[int], output_ids: list[int],
                      finish_reason: str = "stop", matched_stop: int | None = 2,
                      completion_tokens: int | None = None, latency_seconds: float = 0.1, source: str = "s",
                      source_row: str = "0", tokenizer: str = "t") -> dict[str, Any]:
    """A GenerationRecord of sample 0, turn 0 (``completion_tokens`` defaults to the output's length)."""
    return {
        "id": id, "prompt_id": prompt_id, "sample_index": 0, "prompt_ids": prompt_ids,
        "output_ids": output_ids, "finish_reason": finish_reason, "matched_stop": matched_stop,
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(output_ids) if completion_tokens is None else completion_tokens,
        "cached_tokens": 0, "latency_seconds": latency_seconds, "endpoint": "e", "model_path": "m",
        "engine_version": "v", "worker_id": "w", "source": source, "source_row": source_row, "turn_index": 0,
        "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": tokenizer,
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }
