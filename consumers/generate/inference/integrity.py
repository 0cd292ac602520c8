"""Integrity rules for every ``/generate`` response: what breaks one never becomes training data.

Rules, per sample: a ``stop`` or ``length`` finish (``abort`` is retried); output ids that are
a list of integers; the record rules of ``eaglefeed.schemas.validity`` (non-empty prompt and output,
``len(output_ids) == completion_tokens``: SGLang bug #10896 leaks prompt-suffix ids;
``prompt_tokens == len(input_ids)``; no negative id); at most ``max_new_tokens`` ids; a
``stop`` on an int ``matched`` ends with that id (``"NaN happened"`` means the last id was
overwritten); every id below ``vocab_size`` when the vocabulary size is known. With
``n`` samples the response is a list of exactly ``n`` of them, matched by position.

A ``length`` finish with fewer ids than ``max_new_tokens`` is an engine-side cap, not a broken
rule: SGLang's scheduler lowers ``max_new_tokens`` to ``max_req_len - len(input_ids) - 1``
(``max_req_len`` = context - 1, so two below what the context would hold), to what the KV cache
can hold, and to ``SGLANG_MAX_NEW_TOKENS_LIMIT``, then reports the lowered value in
``finish_reason.length`` (``srt/managers/scheduler.py`` ``init_req_max_new_tokens``); vLLM stops
at its context length. The sample carries the cap (``Generation.capped_at``) and the worker's
``--on-capped`` decides its fate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eaglefeed.core.errors import RetryableInferenceError
from eaglefeed.dataset.hidden_states import HiddenStatesRef
from eaglefeed.schemas.validity import token_problem


@dataclass(frozen=True)
class Generation:
    """One checked sample returned by the server."""

    output_ids: list[int]
    finish_reason: str
    matched_stop: int | str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_seconds: float
    endpoint: str
    capped_at: int | None = None  # the engine's own output cap, when it stopped below max_new_tokens
    weight_version: str | None = None  # of the weights that generated it, when the response says
    sampling_seed: int | None = None  # its own seed, when the engine sent one per sample (a batch)
    capture_path: str | None = None  # where the server says it writes the sample's hidden states
    hidden_states: HiddenStatesRef | None = None  # the checked file, once the worker found it
    states: Any = None  # SGLang: the ``[T, width]`` aux states the response carried, to be stored


def check_samples(payload: object, n: int, input_ids: list[int], sampling_params: Mapping[str, Any], *,
                  vocab_size: int | None, endpoint: str, latency: float) -> list[Generation]:
    """Validate a non-streaming response for one prompt with ``n`` samples.

    Raises:
        RetryableInferenceError: ``integrity`` when a rule is broken, ``abort`` on an abort finish.
    """
    if n == 1:
        return [check_response(payload, input_ids, sampling_params, vocab_size=vocab_size,
                               endpoint=endpoint, latency=latency)]
    if not isinstance(payload, list) or len(payload) != n:
        raise RetryableInferenceError("integrity", f"expected a list of {n} samples")
    return [check_response(item, input_ids, sampling_params, vocab_size=vocab_size, endpoint=endpoint,
                           latency=latency) for item in payload]


def check_response(payload: object, input_ids: list[int], sampling_params: Mapping[str, Any], *,
                   vocab_size: int | None = None, endpoint: str, latency: float) -> Generation:
    """Validate one sample of a non-streaming ``/generate`` response.

    Raises:
        RetryableInferenceError: ``integrity`` when the response breaks a rule, ``abort`` on an
            abort finish.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("meta_info"), dict):
        raise RetryableInferenceError("integrity", "response is not a generation object")
    meta = payload["meta_info"]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind == "abort":
        raise RetryableInferenceError("abort", f"generation aborted: {finish.get('message')}")
    if kind not in ("stop", "length"):
        raise RetryableInferenceError("integrity", f"unexpected finish_reason {finish!r}")
    output_ids = payload.get("output_ids")
    version = meta.get("weight_version")
    return check_generation(output_ids, kind=kind, matched=finish.get("matched"),
                            prompt_tokens=meta.get("prompt_tokens"),
                            completion_tokens=meta.get("completion_tokens"),
                            cached_tokens=meta.get("cached_tokens") or 0, input_ids=input_ids,
                            sampling_params=sampling_params, vocab_size=vocab_size, endpoint=endpoint,
                            latency=latency, weight_version=version if isinstance(version, str) else None)


def check_generation(output_ids: object, *, kind: str, matched: object, prompt_tokens: object,
                     completion_tokens: object, cached_tokens: object, input_ids: list[int],
                     sampling_params: Mapping[str, Any], vocab_size: int | None, endpoint: str,
                     latency: float, weight_version: str | None = None) -> Generation:
    """Apply every engine-independent rule to one sample's fields (``kind`` is stop or length).

    Raises:
        RetryableInferenceError: ``integrity`` when a rule is broken.
    """
    if not isinstance(output_ids, list) or not all(type(t) is int for t in output_ids):
        raise RetryableInferenceError("integrity", "output_ids is not a list of integers")
    problem = token_problem(prompt_ids=input_ids, output_ids=output_ids,
                            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    if problem is not None:
        raise RetryableInferenceError("integrity", problem)
    wanted = int(sampling_params.get("max_new_tokens", 1 << 30))
    if len(output_ids) > wanted:
        raise RetryableInferenceError("integrity", "more output ids than max_new_tokens")
    if kind == "stop" and type(matched) is int and output_ids[-1] != matched:
        raise RetryableInferenceError("integrity", f"stop on {matched} but the last id is {output_ids[-1]}")
    if matched == "NaN happened":
        raise RetryableInferenceError("integrity", "the server sampled an out-of-range id (NaN happened)")
    if vocab_size is not None and max(output_ids) >= vocab_size:
        bad = next(t for t in output_ids if t >= vocab_size)
        raise RetryableInferenceError("integrity",
                                      f"output id {bad} outside the vocabulary [0, {vocab_size})")
    cached = cached_tokens
    if type(cached) is not int or not 0 <= cached <= len(input_ids):
        raise RetryableInferenceError("integrity", f"cached_tokens={cached!r} is not a prompt token count")
    if matched is not None and not isinstance(matched, (int, str)):
        raise RetryableInferenceError("integrity", f"matched stop {matched!r} is neither an id nor a string")
    return Generation(
        output_ids=output_ids, finish_reason=kind, matched_stop=matched,
        prompt_tokens=len(input_ids), completion_tokens=len(output_ids),
        cached_tokens=cached, latency_seconds=latency, endpoint=endpoint,
        capped_at=len(output_ids) if kind == "length" and len(output_ids) < wanted else None,
        weight_version=weight_version)
