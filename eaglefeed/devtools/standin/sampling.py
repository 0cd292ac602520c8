"""Parse and validate one ``sampling_params`` dict the way SGLang's ``SamplingParams`` does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_NEW_TOKENS = 128
TOP_K_ALL = 1 << 30
_GREEDY_EPS = 1e-6


class SamplingParamsError(ValueError):
    """A value SGLang rejects with HTTP 400 (``{"error": {"message": ...}}``)."""


class UnknownSamplingParamError(TypeError):
    """A key ``SamplingParams`` does not know; SGLang lets the TypeError escape (HTTP 500)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Normalised sampling parameters of one request item.

    ``max_new_tokens`` is None only when the client sent ``null`` (then the server clamps it
    to the remaining context, like SGLang). ``max_new_tokens_given`` records whether the client
    set it, because SGLang checks prompt + ``max_new_tokens`` against the context only then.
    """

    max_new_tokens: int | None = DEFAULT_MAX_NEW_TOKENS
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = TOP_K_ALL
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    max_new_tokens_given: bool = False
    sampling_seed: int | None = None
    stream_interval: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()

    @property
    def greedy(self) -> bool:
        """True when decoding is greedy (temperature ~0 or top_k 1)."""
        return self.top_k == 1


_FLOATS = (
    "temperature",
    "top_p",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
)
_INTS = ("min_new_tokens", "top_k", "n")
_BOOLS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")
_ACCEPTED_IGNORED = frozenset({"custom_params", "stop_regex"})
_GRAMMAR = ("json_schema", "regex", "ebnf", "structural_tag")
_KNOWN = frozenset(
    {*_FLOATS, *_INTS, *_BOOLS, *_ACCEPTED_IGNORED, *_GRAMMAR}
    | {"max_new_tokens", "stop", "stop_token_ids", "sampling_seed", "stream_interval", "logit_bias"}
)


def parse_sampling_params(raw: dict[str, Any] | None, *, vocab_size: int) -> SamplingParams:
    """Build validated ``SamplingParams`` from a request's dict.

    Args:
        raw: the ``sampling_params`` dict (or None for all defaults).
        vocab_size: bound for ``logit_bias`` keys and ``stop_token_ids``.

    Raises:
        UnknownSamplingParamError: for a key SGLang's ``SamplingParams`` does not accept.
        SamplingParamsError: for a value SGLang's ``verify()`` rejects, or a wrong type.
    """
    if not raw:
        return _DEFAULT
    try:
        key: tuple[Any, ...] | None = (vocab_size, *((k, type(v), v) for k, v in raw.items()))
        cached = _CACHE.get(key)  # type: ignore[arg-type]
    except TypeError:  # a list value (stop strings, stop ids): not hashable, not cached
        key, cached = None, None
    if cached is not None:
        return cached
    params = _parse(raw, vocab_size)
    if key is not None and len(_CACHE) < _CACHE_SIZE:
        _CACHE[key] = params
    return params


def _parse(raw: dict[str, Any], vocab_size: int) -> SamplingParams:
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise UnknownSamplingParamError(
            f"SamplingParams.__init__() got an unexpected keyword argument '{unknown[0]}'"
        )
    grammar = [key for key in _GRAMMAR if raw.get(key) is not None]
    if len(grammar) > 1:
        raise SamplingParamsError("Only one of regex, json_schema, or ebnf can be set.")
    if grammar:
        raise SamplingParamsError(
            f"{grammar[0]} (constrained decoding) is not supported by the eaglefeed stand-in."
        )
    values: dict[str, Any] = {}
    for key in _FLOATS:
        if raw.get(key) is not None:
            values[key] = _number(key, raw[key])
    for key in _INTS:
        if raw.get(key) is not None:
            values[key] = _integer(key, raw[key])
    for key in _BOOLS:
        if raw.get(key) is not None:
            values[key] = _boolean(key, raw[key])
    if raw.get("max_new_tokens") is not None:
        values["max_new_tokens_given"] = True
    if "max_new_tokens" in raw:
        values["max_new_tokens"] = (
            None if raw["max_new_tokens"] is None else _integer("max_new_tokens", raw["max_new_tokens"])
        )
    for key in ("sampling_seed", "stream_interval"):
        if raw.get(key) is not None:
            values[key] = _integer(key, raw[key])
    values.update(_stops(raw, vocab_size))
    if raw.get("logit_bias") is not None:
        values["logit_bias"] = _logit_bias(raw["logit_bias"], vocab_size)
    return _verify(SamplingParams(**values))


def _verify(params: SamplingParams) -> SamplingParams:
    temperature, top_k = params.temperature, params.top_k
    if not math.isfinite(temperature) or temperature < 0.0:
        raise SamplingParamsError(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < params.top_p <= 1.0:
        raise SamplingParamsError(f"top_p must be in (0, 1], got {params.top_p}.")
    if not 0.0 <= params.min_p <= 1.0:
        raise SamplingParamsError(f"min_p must be in [0, 1], got {params.min_p}.")
    if top_k < 1 and top_k != -1:
        raise SamplingParamsError(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(params, name)
        if not -2.0 <= value <= 2.0:
            raise SamplingParamsError(f"{name} must be in [-2, 2], got {value}.")
    if not 0.0 < params.repetition_penalty <= 2.0:
        raise SamplingParamsError(f"repetition_penalty must be in (0, 2], got {params.repetition_penalty}.")
    if params.min_new_tokens < 0:
        raise SamplingParamsError(
            f"min_new_tokens must be in [0, max_new_tokens], got {params.min_new_tokens}."
        )
    if params.max_new_tokens is not None:
        if params.max_new_tokens < 0:
            raise SamplingParamsError(f"max_new_tokens must be at least 0, got {params.max_new_tokens}.")
        if params.min_new_tokens > params.max_new_tokens:
            raise SamplingParamsError(
                f"min_new_tokens must be in [0, max_new_tokens({params.max_new_tokens})], "
                f"got {params.min_new_tokens}."
            )
    if params.stream_interval is not None and params.stream_interval < 1:
        raise SamplingParamsError(f"stream_interval must be at least 1, got {params.stream_interval}.")
    if params.n < 1:
        raise SamplingParamsError(f"n must be at least 1, got {params.n}.")
    if top_k == -1:
        top_k = TOP_K_ALL
    if 0.0 <= temperature < _GREEDY_EPS:
        temperature, top_k = 1.0, 1
    if (temperature, top_k) == (params.temperature, params.top_k):
        return params
    return _replace(params, temperature=temperature, top_k=top_k)


def _replace(params: SamplingParams, **changes: Any) -> SamplingParams:
    fields = {name: getattr(params, name) for name in SamplingParams.__dataclass_fields__}
    fields.update(changes)
    return SamplingParams(**fields)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SamplingParamsError(f"{key} must be a number, got {value!r}.")
    return float(value)


def _integer(key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingParamsError(f"{key} must be an integer, got {value!r}.")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SamplingParamsError(f"{key} must be a boolean, got {value!r}.")
    return value


def _stops(raw: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    values: dict[str, Any] = {}
    stop = raw.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise SamplingParamsError(f"stop must be a string or a list of strings, got {stop!r}.")
        values["stop"] = tuple(s for s in stops if s)
    stop_ids = raw.get("stop_token_ids")
    if stop_ids is not None:
        if not isinstance(stop_ids, list):
            raise SamplingParamsError(f"stop_token_ids must be a list of integers, got {stop_ids!r}.")
        ids = tuple(dict.fromkeys(_integer("stop_token_ids", i) for i in stop_ids if i is not None))
        bad = [i for i in ids if not 0 <= i < vocab_size]
        if bad:
            raise SamplingParamsError(f"stop_token_ids must lie in [0, {vocab_size}), got {bad[0]}.")
        values["stop_token_ids"] = ids
    return values


def _logit_bias(raw: Any, vocab_size: int) -> tuple[tuple[int, float], ...]:
    if not isinstance(raw, dict):
        raise SamplingParamsError(f"logit_bias must be an object, got {raw!r}.")
    items = []
    for key, bias in raw.items():
        try:
            token_id = int(key)
        except ValueError:
            raise SamplingParamsError(f"logit_bias key {key!r} is not a token id.") from None
        if not 0 <= token_id < vocab_size:
            raise SamplingParamsError(
                f"logit_bias key {token_id} is out of the vocabulary [0, {vocab_size})."
            )
        items.append((token_id, _number("logit_bias", bias)))
    return tuple(sorted(items))


_DEFAULT = SamplingParams()
_CACHE_SIZE = 4096
_CACHE: dict[tuple[Any, ...], SamplingParams] = {}
"""Parsed dicts of hashable values; requests of one job usually share their sampling_params."""
