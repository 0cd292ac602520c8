"""SGLang 0.5.23's JSON contract gate on ``/generate``: an unknown or mistyped sampling key is a 400.

SGLang 0.5.23 checks every ``/generate`` body against its API schema before anything else
(``srt/entrypoints/http_server.py`` ``generate_request`` → ``srt/entrypoints/api_contract.py`` →
``sglang/api/v1/api_types.py`` ``decode_SamplingParams``): ``sampling_params`` rejects unknown
keys, and the answer is HTTP 400 with ``{"error": "<serde-style text>"}`` (a plain string, not
the ``{"message": ...}`` object of later errors), e.g. ``unknown field `seed`, expected one of
`max_new_tokens`, ...`` or ``invalid type: floating point `1.5`, expected i64``. Older releases
let the unknown key reach ``SamplingParams(**kwargs)``, whose ``TypeError`` was a 500.
"""

from __future__ import annotations

from typing import Any

FIELDS = ("max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
          "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
          "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
          "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
          "sampling_seed", "custom_params", "beam_width", "watermark", "choice")
"""``sampling_params`` keys of SGLang 0.5.23's schema, in its order (the 400 text lists them so)."""

_INTS = frozenset({"max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed",
                   "beam_width"})
_FLOATS = frozenset({"temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                     "repetition_penalty"})
_BOOLS = frozenset({"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"})
_STRINGS = frozenset({"json_schema", "regex", "ebnf", "structural_tag"})


def contract_error(body: dict[str, Any]) -> str | None:
    """The schema violation of a ``/generate`` body (None: it passes).

    Checks ``sampling_params`` and ``return_hidden_states`` (``BoolOrList``: a boolean or a list of
    booleans, so the engine API's ``"last"`` is refused over HTTP), in the body's key order as the
    generated decoder walks it.
    """
    for key in body:
        if key == "sampling_params":
            problem = _sampling_error(body)
        elif key == "return_hidden_states":
            problem = _bool_or_list_error(body[key])
        else:
            continue
        if problem is not None:
            return problem
    return None


def _bool_or_list_error(value: Any) -> str | None:
    """``decode_BoolOrList`` of ``sglang/api/v1/api_types.py``."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, list):
        bad = next((v for v in value if not isinstance(v, bool)), _OK)
        return None if bad is _OK else f"invalid type: {_unexpected(bad)}, expected a boolean"
    return f"invalid type: {_unexpected(value)}, expected a value or an array of values for BoolOrList"


_OK = object()


def _sampling_error(body: dict[str, Any]) -> str | None:
    raw = body.get("sampling_params")
    items = raw if isinstance(raw, list) else [raw]
    for params in items:
        if params is None:
            continue
        if not isinstance(params, dict):
            return f"invalid type: {_unexpected(params)}, expected struct SamplingParams"
        for key, value in params.items():
            problem = _field_error(key, value)
            if problem is not None:
                return problem
    return None


def _field_error(key: str, value: Any) -> str | None:
    if key not in FIELDS:
        listed = ", ".join(f"`{f}`" for f in FIELDS)
        return f"unknown field `{key}`, expected one of {listed}"
    if value is None:
        return None
    if key in _INTS and not _is_int(value):
        return f"invalid type: {_unexpected(value)}, expected i64"
    if key in _FLOATS and not (_is_int(value) or isinstance(value, float)):
        return f"invalid type: {_unexpected(value)}, expected f64"
    if key in _BOOLS and not isinstance(value, bool):
        return f"invalid type: {_unexpected(value)}, expected a boolean"
    if key in _STRINGS and not isinstance(value, str):
        return f"invalid type: {_unexpected(value)}, expected a string"
    if key == "stop_token_ids":
        if not isinstance(value, list):
            return f"invalid type: {_unexpected(value)}, expected a sequence"
        bad = next((v for v in value if not _is_int(v)), None)
        if bad is not None or None in value:
            return f"invalid type: {_unexpected(bad)}, expected i64"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unexpected(value: Any) -> str:
    """Serde's ``Unexpected`` wording, which SGLang's Python gate copies."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    return "map" if isinstance(value, dict) else type(value).__name__
