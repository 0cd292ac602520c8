"""Response bodies in SGLang's exact shapes: output elements, SSE chunks and error envelopes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from eaglefeed.devtools.standin.faults import contaminate
from eaglefeed.devtools.standin.hidden_states import hidden_states
from eaglefeed.devtools.standin.sampling import SamplingParams
from eaglefeed.devtools.standin.scheduler import Sequence
from eaglefeed.devtools.standin.vocab import Vocab

SSE_DONE = b"data: [DONE]\n\n"
QUEUE_FULL_MESSAGE = "The request queue is full."

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def dumps(obj: Any) -> str:
    """Serialise compactly (the hot path's JSON encoder)."""
    return _dumps(obj)


def json_response(obj: Any, *, status: int = 200) -> web.Response:
    """Return a compact JSON response."""
    return web.Response(body=_dumps(obj).encode(), status=status, content_type="application/json")


def error_response(message: str) -> web.Response:
    """Return SGLang's ``/generate`` ValueError shape: 400 ``{"error": {"message": ...}}``."""
    return json_response({"error": {"message": message}}, status=400)


def envelope(message: str, status: int, error_type: str | None = None) -> dict[str, Any]:
    """Return SGLang's ``ErrorResponse`` envelope."""
    return {
        "object": "error",
        "message": message,
        "type": error_type or str(status),
        "param": None,
        "code": status,
    }


def envelope_response(message: str, status: int, error_type: str | None = None) -> web.Response:
    """Return the ``ErrorResponse`` envelope (503 queue full, 500, 400 validation)."""
    return json_response(envelope(message, status, error_type), status=status)


@dataclass(frozen=True, slots=True)
class HiddenCapture:
    """What ``meta_info.hidden_states`` of one sequence holds.

    Attributes:
        first: the first prompt position of the prefill block.
        layers: the layers of a row, in order (vLLM's ids).
        width: the hidden size.
    """

    first: int
    layers: list[int]
    width: int


def output_element(
    seq: Sequence,
    *,
    vocab: Vocab,
    params: SamplingParams,
    input_ids: list[int],
    weight_version: str,
    count: int | None = None,
    since: int = 0,
    contaminated: bool = False,
    return_prompt_token_ids: bool = False,
    hidden: HiddenCapture | None = None,
) -> dict[str, Any]:
    """Build one output object (a response element or a stream chunk).

    Args:
        seq: the sequence.
        vocab: for decoding ``text``.
        params: its sampling parameters (``skip_special_tokens``, ``no_stop_trim``).
        input_ids: its prompt (contamination fault, ``prompt_token_ids``).
        weight_version: ``meta_info.weight_version``.
        count: how many output ids are visible (None: all emitted; a stream chunk may lag).
        since: first visible id of this chunk (incremental streaming); 0 for cumulative.
        contaminated: emulate SGLang bug #10896 (prompt-suffix ids lead ``output_ids``).
        return_prompt_token_ids: add ``prompt_token_ids``.
        hidden: add ``meta_info.hidden_states`` (cumulative in every chunk, as SGLang sends it).
    """
    ids = seq.output_ids if count is None else seq.completion.output_ids[:count]
    completion_tokens = len(ids)
    all_ids = ids
    final = seq.finished and (count is None or count >= seq.emitted)
    finish_reason = seq.finish_reason if final else None
    text = _text(vocab, ids, params, finish_reason)
    if since:
        text = text[len(_text(vocab, ids[:since], params, None)) :]
        ids = ids[since:]
    if contaminated and since == 0:
        ids = contaminate(ids, input_ids)
    meta: dict[str, Any] = {
        "id": seq.rid,
        "finish_reason": finish_reason,
        "prompt_tokens": seq.prompt_len,
        "weight_version": weight_version,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": seq.cached_tokens,
    }
    if final:  # SGLang adds the weight versions that produced the output once a request finished
        meta["weight_versions"] = [{"version": weight_version, "start": 0, "end": completion_tokens}]
    if hidden is not None:
        meta["hidden_states"] = hidden_states(input_ids, all_ids, first=hidden.first, count=completion_tokens,
                                              layers=hidden.layers, width=hidden.width)
    if final and seq.finished_at is not None:
        meta["e2e_latency"] = seq.finished_at - seq.arrival
        meta["response_sent_to_client_ts"] = time.time()
    element: dict[str, Any] = {"text": text, "output_ids": ids, "meta_info": meta}
    if return_prompt_token_ids:
        element["prompt_token_ids"] = input_ids
    return element


def _text(vocab: Vocab, ids: list[int], params: SamplingParams, finish_reason: dict[str, Any] | None) -> str:
    """Decode like SGLang's detokenizer, trimming the matched stop unless ``no_stop_trim``."""
    matched = finish_reason.get("matched") if finish_reason else None
    trim = matched is not None and not params.no_stop_trim
    if trim and isinstance(matched, int):
        ids = ids[:-1]
    text = vocab.decode(ids, skip_special_tokens=params.skip_special_tokens)
    if trim and isinstance(matched, str):
        position = text.find(matched)
        if position >= 0:
            text = text[:position]
    return text


def sse_chunk(obj: Any) -> bytes:
    """Encode one server-sent event."""
    return b"data: " + _dumps(obj).encode() + b"\n\n"
