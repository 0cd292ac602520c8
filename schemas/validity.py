"""What makes a GenerationRecord valid training data: one set of rules, per record and per batch.

A record is invalid when its id is empty, its output or prompt is empty, a token count
disagrees with its ids (``completion_tokens`` with the output ids, ``prompt_tokens`` with the
prompt ids), or an id is negative. The worker checks every response against the token rules
before it builds a record (``eaglefeed.consumers.generate.inference.integrity``); the sink checks
every decoded batch (:func:`invalid_rows`) before a row reaches the training data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eaglefeed.schemas.columnar import GenerationBatch


def token_problem(*, prompt_ids: Sequence[int], output_ids: Sequence[int], prompt_tokens: object,
                  completion_tokens: object) -> str | None:
    """Why these ids and counts cannot be a training row, or None when they can.

    Args:
        prompt_ids: the ids sent.
        output_ids: the ids generated.
        prompt_tokens: the server's count of prompt tokens.
        completion_tokens: the server's count of generated tokens.
    """
    p, o = len(prompt_ids), len(output_ids)
    if o == 0:
        return "empty output"
    if p == 0:
        return "empty prompt"
    if completion_tokens != o:
        return f"completion_tokens {completion_tokens} != {o} output ids"
    if prompt_tokens != p:
        return f"prompt_tokens {prompt_tokens} != {p} prompt ids"
    if min(prompt_ids) < 0 or min(output_ids) < 0:
        return "negative token id"
    return None


def record_problem(record: Mapping[str, Any]) -> str | None:
    """Why a decoded GenerationRecord cannot be a training row, or None when it can."""
    if not record["id"]:
        return "empty id"
    return token_problem(prompt_ids=record["prompt_ids"], output_ids=record["output_ids"],
                         prompt_tokens=record["prompt_tokens"], completion_tokens=record["completion_tokens"])


def invalid_rows(batch: GenerationBatch) -> list[tuple[int, str]]:
    """The rows of ``batch`` that :func:`record_problem` rejects, with the reason, in row order.

    A vectorised pass finds the suspect rows; the reason of each comes from the per-record rules.
    """
    if not len(batch):
        return []
    plen, olen = batch.prompt_len, batch.output_len
    completion = np.array([r["completion_tokens"] for r in batch.rows], np.int64)
    prompt = np.array([r["prompt_tokens"] for r in batch.rows], np.int64)
    offsets = batch.offsets
    # the smallest id of each row (read for non-empty rows only, where it is meaningful)
    lowest = np.minimum.reduceat(np.append(batch.tokens, 0), offsets[:-1])
    suspect = (olen == 0) | (plen == 0) | (completion != olen) | (prompt != plen) | (lowest < 0)
    suspect |= np.array([not r["id"] for r in batch.rows])
    bad = []
    for r in np.flatnonzero(suspect).tolist():
        start, split, end = int(offsets[r]), int(offsets[r] + plen[r]), int(offsets[r + 1])
        reason = record_problem({**batch.rows[r], "prompt_ids": batch.tokens[start:split].tolist(),
                                 "output_ids": batch.tokens[split:end].tolist()})
        if reason is not None:
            bad.append((r, reason))
    return bad
