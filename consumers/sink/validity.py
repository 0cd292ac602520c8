"""Which decoded generations must not become training rows, and why."""

from __future__ import annotations

import numpy as np

from schemas.columnar import GenerationBatch


def invalid_rows(batch: GenerationBatch) -> list[tuple[int, str]]:
    """Rows that must not become training rows, with the reason (token counts, empty ids, bad ids).

    Args:
        batch: decoded generations.

    Returns:
        ``(row, reason)`` for every invalid row, in row order.
    """
    if not len(batch):
        return []
    plen, olen = batch.prompt_len, batch.output_len
    completion = np.array([r["completion_tokens"] for r in batch.rows], np.int64)
    prompt = np.array([r["prompt_tokens"] for r in batch.rows], np.int64)
    # the smallest id of each row (read for non-empty rows only, where it is meaningful)
    lowest = np.minimum.reduceat(np.append(batch.tokens, 0), batch.offsets[:-1])
    suspect = (olen == 0) | (plen == 0) | (completion != olen) | (prompt != plen) | (lowest < 0)
    suspect |= np.array([not r["id"] for r in batch.rows])
    bad = []
    for r in np.flatnonzero(suspect).tolist():
        row, p, o = batch.rows[r], int(plen[r]), int(olen[r])
        if not row["id"]:
            bad.append((r, "empty id"))
        elif o == 0:
            bad.append((r, "empty output"))
        elif p == 0:
            bad.append((r, "empty prompt"))
        elif row["completion_tokens"] != o:
            bad.append((r, f"completion_tokens {row['completion_tokens']} != {o} output ids"))
        elif row["prompt_tokens"] != p:
            bad.append((r, f"prompt_tokens {row['prompt_tokens']} != {p} prompt ids"))
        else:
            bad.append((r, "negative token id"))
    return bad
