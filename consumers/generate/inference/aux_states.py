"""SGLang's aux hidden states in a ``/generate`` response: read, checked whole, as one ``[T, width]`` array.

SGLang 0.5.23 started with ``--enable-return-aux-hidden-states`` answers ``return_hidden_states:
true`` with ``meta_info.hidden_states = [block, row, row, ...]``: a block of one row per prompt
position the prefill computed, then one row per decoded token but the last, each row the aux
layers concatenated in ascending order (docs/journal/sglang-aux-hidden-states.md). The span is
prompt + output[:-1] only when nothing was skipped: positions the prefix cache served, prefill
chunks before the last, and a retraction's second block all break it, and the values cannot be
recovered by asking again, so a broken span fails the request with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from eaglefeed.core.errors import RetryableInferenceError


def aux_states(meta: Mapping[str, Any], *, prompt_len: int, output_len: int) -> np.ndarray:
    """The ``[prompt_len + output_len - 1, width]`` float32 states of one sample's ``meta_info``.

    Raises:
        RetryableInferenceError: ``hidden_states`` when the states are absent or do not cover
            exactly prompt + output[:-1] (cached or chunked prefill, a retraction), or are ragged.
    """
    states = meta.get("hidden_states")
    if not isinstance(states, list) or not states or not isinstance(states[0], list):
        raise RetryableInferenceError("hidden_states", "the response holds no meta_info.hidden_states")
    block, rows = states[0], states[1:]
    if meta.get("num_retractions"):
        raise RetryableInferenceError("hidden_states", f"the request was retracted {meta['num_retractions']} "
                                      "times: SGLang's states hold its prefill twice")
    if len(block) != prompt_len:
        cached = meta.get("cached_tokens") or 0
        raise RetryableInferenceError(
            "hidden_states", f"SGLang returned states for {len(block)} of {prompt_len} prompt positions "
            f"({cached} from its prefix cache): start it with --disable-radix-cache and "
            "--chunked-prefill-size -1")
    if len(rows) != output_len - 1:
        raise RetryableInferenceError("hidden_states", f"SGLang returned {len(rows)} decode rows for "
                                      f"{output_len} output ids (expected {output_len - 1})")
    try:
        array = np.asarray(block + rows, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        raise RetryableInferenceError("hidden_states", f"hidden states ragged or not numbers: {exc}") \
            from exc
    if array.ndim != 2 or not array.shape[1]:
        raise RetryableInferenceError("hidden_states", f"hidden states of shape {list(array.shape)}")
    return array
