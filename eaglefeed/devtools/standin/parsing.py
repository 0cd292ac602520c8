"""Turn a ``/generate`` body into validated request items, raising SGLang's error classes.

Three error classes map to SGLang's three error shapes (see ``responses``):

- ``BadRequestError``: malformed JSON or a field of the wrong type (FastAPI validation):
  400 ``{"object": "error", ..., "type": "Bad Request", "code": 400}``.
- ``ValueError`` (``InvalidRequestError``, ``SamplingParamsError``): what SGLang's
  tokenizer manager raises: 400 ``{"error": {"message": ...}}``.
- ``UnknownSamplingParamError`` (a ``TypeError``): an unknown ``sampling_params`` key, which
  SGLang does not catch: 500.
"""

from __future__ import annotations

import json
import random
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eaglefeed.devtools.standin import hidden_states
from eaglefeed.devtools.standin.sampling import SamplingParams, parse_sampling_params
from eaglefeed.devtools.standin.vocab import Vocab

if TYPE_CHECKING:
    from eaglefeed.devtools.standin.config import StandinConfig


class BadRequestError(Exception):
    """The body is not JSON, or a field has the wrong type."""


class InvalidRequestError(ValueError):
    """SGLang would raise ``ValueError`` for this request (HTTP 400)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestItem:
    """One prompt of a request (before ``n`` expansion).

    Attributes:
        input_ids: the prompt ids.
        params: its sampling parameters.
        rid: the request id to report (regenerated per sample when ``n > 1``).
        max_new_tokens: the effective output limit after clamping to the context.
    """

    input_ids: list[int]
    params: SamplingParams
    rid: str
    max_new_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateRequest:
    """A parsed ``/generate`` call.

    Attributes:
        items: the prompts, in request order.
        n: samples per prompt.
        is_single: answer with one object rather than a list.
        stream: answer with server-sent events.
        return_prompt_token_ids: add ``prompt_token_ids`` to each output.
        return_hidden_states: per item, whether ``meta_info.hidden_states`` was asked for.
    """

    items: list[RequestItem]
    n: int
    is_single: bool
    stream: bool
    return_prompt_token_ids: bool
    return_hidden_states: tuple[bool, ...] = ()


_RID_BITS = random.SystemRandom().getrandbits(64)
_rid_source = random.Random(_RID_BITS)


def new_rid() -> str:
    """Return a fresh 32-hex-digit request id, like ``uuid4().hex`` but without a syscall."""
    return f"{_rid_source.getrandbits(128):032x}"


def load_body(body: bytes) -> dict[str, Any]:
    """Decode a JSON object body.

    Raises:
        BadRequestError: not JSON, or not an object.
    """
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"JSON decode error: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequestError(f"Input should be a valid dictionary or object, got {type(obj).__name__}")
    return obj


def parse_generate(obj: dict[str, Any], *, vocab: Vocab, context_length: int,
                   preferred: dict[str, Any] | None = None,
                   capture: StandinConfig | None = None) -> GenerateRequest:
    """Parse and validate a decoded ``/generate`` body.

    Args:
        obj: the body from ``load_body``.
        vocab: the served tokenizer (token-id bounds, ``text`` tokenisation).
        context_length: the model's context length.
        preferred: the server's preferred sampling params, merged under each item's (SGLang's
            ``{**preferred_sampling_params, **obj.sampling_params}``).
        capture: the server config whose hidden-state flags decide whether ``return_hidden_states``
            is allowed (None: nothing is captured).

    Raises:
        BadRequestError: wrong field types.
        InvalidRequestError: a request SGLang rejects with 400.
        SamplingParamsError: an invalid sampling value (400).
        UnknownSamplingParamError: an unknown sampling key (500).
    """
    _reject_unsupported(obj)
    prompts, is_batch = _prompts(obj, vocab)
    params = _sampling_params(obj.get("sampling_params"), len(prompts), is_batch, vocab.vocab_size,
                              preferred or {})
    n = params[0].n
    if any(p.n != n for p in params):
        raise InvalidRequestError(
            "The parallel_sample_num should be the same for all samples in sample params."
        )
    rids = _rids(obj.get("rid"), len(prompts), is_batch)
    try:  # SGLang normalises the batch (its list-length check) before validating each request
        asked = hidden_states.requested(obj.get("return_hidden_states"), len(prompts), is_batch)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None
    items = [
        RequestItem(input_ids=ids, params=p, rid=rid, max_new_tokens=_max_new_tokens(ids, p, context_length))
        for ids, p, rid in zip(prompts, params, rids, strict=True)
    ]
    try:  # after the length checks, as SGLang's _validate_one_request
        hidden_states.check_requested(asked, capture)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None
    stream = obj.get("stream", False)
    return_prompt_ids = obj.get("return_prompt_token_ids", False)
    for name, value in (("stream", stream), ("return_prompt_token_ids", return_prompt_ids)):
        if not isinstance(value, bool):
            raise BadRequestError(f"{name}: Input should be a valid boolean, got {value!r}")
    return GenerateRequest(
        items=items,
        n=n,
        is_single=not is_batch and n == 1,
        stream=stream,
        return_prompt_token_ids=return_prompt_ids,
        return_hidden_states=tuple(asked),
    )


def _reject_unsupported(obj: dict[str, Any]) -> None:
    if (
        _truthy(obj.get("return_logprob"))
        or _truthy(obj.get("top_logprobs_num"))
        or obj.get("token_ids_logprob")
    ):
        raise InvalidRequestError(
            "return_logprob is not supported by the eaglefeed SGLang stand-in (it has no real logits)."
        )
    if obj.get("custom_logit_processor") is not None:
        raise InvalidRequestError(
            "The server is not configured to enable custom logit processor. "
            "Please set `--enable-custom-logit-processor` to enable this feature."
        )
    if obj.get("input_embeds") is not None:
        raise InvalidRequestError("input_embeds is not supported by the eaglefeed SGLang stand-in.")


def _truthy(value: Any) -> bool:
    return any(value) if isinstance(value, list) else bool(value)


def _prompts(obj: dict[str, Any], vocab: Vocab) -> tuple[list[list[int]], bool]:
    input_ids = obj.get("input_ids")
    text = obj.get("text")
    if input_ids is None and text is None:
        raise InvalidRequestError("Either text, input_ids or input_embeds should be provided.")
    if input_ids is None:
        return _tokenize(text, vocab)
    if not isinstance(input_ids, list):
        raise BadRequestError(f"input_ids: Input should be a valid list, got {type(input_ids).__name__}")
    if not input_ids:
        raise InvalidRequestError("input_ids cannot be empty.")
    if type(input_ids[0]) is int:
        return [_check_ids(input_ids, vocab.vocab_size)], False
    if not all(isinstance(ids, list) for ids in input_ids):
        raise BadRequestError("input_ids: Input should be a list of integers or a list of lists of integers")
    return [_check_ids(ids, vocab.vocab_size) for ids in input_ids], True


def _check_ids(ids: list[Any], vocab_size: int) -> list[int]:
    if not ids:
        raise InvalidRequestError("input_ids cannot be empty.")
    try:
        packed = array("q", ids)  # C-speed type check: rejects floats, strings, None
    except (TypeError, OverflowError):
        raise BadRequestError(
            "input_ids: Input should be a list of integers or a list of lists of integers"
        ) from None
    low, high = min(packed), max(packed)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise InvalidRequestError(
            f"Token id {bad} in input_ids is outside the vocabulary [0, {vocab_size}) "
            "of the stand-in's tokenizer."
        )
    return ids


def _tokenize(text: Any, vocab: Vocab) -> tuple[list[list[int]], bool]:
    if isinstance(text, str):
        texts, is_batch = [text], False
    elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
        texts, is_batch = text, True
    else:
        raise BadRequestError("text: Input should be a valid string or a non-empty list of strings")
    prompts = [vocab.encode(t) for t in texts]
    if any(not ids for ids in prompts):
        raise InvalidRequestError("input_ids cannot be empty.")
    return prompts, is_batch


def _sampling_params(raw: Any, batch: int, is_batch: bool, vocab_size: int,
                     preferred: dict[str, Any]) -> list[SamplingParams]:
    if raw is None or isinstance(raw, dict):
        params = parse_sampling_params({**preferred, **(raw or {})}, vocab_size=vocab_size)
        return [params] * batch
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise BadRequestError("sampling_params: Input should be a valid dictionary or a list of dictionaries")
    if len(raw) != batch:
        raise InvalidRequestError(
            f"The length of sampling_params ({len(raw)}) does not match the batch size ({batch})."
        )
    return [parse_sampling_params({**preferred, **p}, vocab_size=vocab_size) for p in raw]


def _rids(raw: Any, batch: int, is_batch: bool) -> list[str]:
    if raw is None:
        return [new_rid() for _ in range(batch)]
    if isinstance(raw, str):
        return [f"{raw}_{i}" for i in range(batch)] if is_batch else [raw]
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise BadRequestError("rid: Input should be a valid string or a list of strings")
    if len(raw) != batch:
        raise InvalidRequestError("The rid should be a list with the same length as the batch size.")
    if len(set(raw)) != len(raw):
        duplicates = sorted({r for r in raw if raw.count(r) > 1})
        raise InvalidRequestError(f"Duplicate request IDs detected within the request: {duplicates}")
    return list(raw)


def _max_new_tokens(ids: list[int], params: SamplingParams, context_length: int) -> int:
    """SGLang 0.5.23's length checks, in its order, and the cap its scheduler applies.

    The tokenizer manager refuses input >= context and input + max_new_tokens > context
    (``_validate_one_request``); then the scheduler, whose ``max_req_len`` is context - 1 and
    ``max_req_input_len`` is ``max_req_len - 5`` (``srt/managers/tp_worker.py``), refuses an
    input of ``max_req_input_len`` or more (``validate_input_length``: a prompt within six tokens
    of the context) and lowers max_new_tokens to ``max_req_len - input - 1``
    (``init_req_max_new_tokens``): two below what the context would hold.
    """
    length = len(ids)
    if length >= context_length:
        raise InvalidRequestError(
            f"The input ({length} tokens) is longer than the model's context length "
            f"({context_length} tokens)."
        )
    requested = params.max_new_tokens
    if params.max_new_tokens_given and requested is not None and length + requested > context_length:
        raise InvalidRequestError(
            "Requested token count exceeds the model's maximum context length of "
            f"{context_length} tokens. You requested a total of {length + requested} tokens: "
            f"{length} tokens from the input messages and {requested} tokens for the completion. "
            "Please reduce the number of tokens in the input messages or the completion to fit "
            "within the limit."
        )
    max_req_len = context_length - 1
    max_input = max_req_input_len(context_length)
    if length >= max_input:
        raise InvalidRequestError(
            f"Input length ({length} tokens) exceeds the maximum allowed length ({max_input} tokens). "
            "Use a shorter input or enable --allow-auto-truncate."
        )
    limit = max(0, max_req_len - length - 1)
    return limit if requested is None else min(requested, limit)


def max_req_input_len(context_length: int) -> int:
    """SGLang's longest accepted prompt: ``max_req_len - 5``, with ``max_req_len`` = context - 1."""
    return context_length - 1 - 5
