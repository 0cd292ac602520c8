"""SamplingParams parsing and SGLang's verify() rules."""

from __future__ import annotations

import math

import pytest

from eaglefeed.devtools.standin.sampling import (
    DEFAULT_MAX_NEW_TOKENS,
    TOP_K_ALL,
    SamplingParamsError,
    UnknownSamplingParamError,
    parse_sampling_params,
)

V = 4096


def parse(raw):
    return parse_sampling_params(raw, vocab_size=V)


def test_defaults():
    params = parse(None)
    assert params.max_new_tokens == DEFAULT_MAX_NEW_TOKENS == 128
    assert (params.temperature, params.top_p, params.top_k, params.n) == (1.0, 1.0, TOP_K_ALL, 1)
    assert parse({}) == params


def test_null_max_new_tokens_stays_none_and_null_others_mean_default():
    params = parse({"max_new_tokens": None, "temperature": None, "ignore_eos": None})
    assert params.max_new_tokens is None
    assert params.temperature == 1.0 and params.ignore_eos is False


def test_temperature_zero_becomes_greedy():
    params = parse({"temperature": 0})
    assert params.greedy and params.top_k == 1 and params.temperature == 1.0
    assert parse({"top_k": -1}).top_k == TOP_K_ALL


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"temperature": -0.1}, "temperature must be non-negative, got -0.1."),
        ({"temperature": math.inf}, "temperature must be non-negative"),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.0."),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"top_k": 0}, "top_k must be -1 (disable), or at least 1, got 0."),
        ({"top_k": -2}, "top_k must be -1"),
        ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5."),
        ({"frequency_penalty": 2.5}, "frequency_penalty must be in [-2, 2], got 2.5."),
        ({"presence_penalty": -3}, "presence_penalty must be in [-2, 2]"),
        ({"repetition_penalty": 0}, "repetition_penalty must be in (0, 2], got 0.0."),
        ({"max_new_tokens": -1}, "max_new_tokens must be at least 0, got -1."),
        ({"min_new_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1."),
        (
            {"max_new_tokens": 4, "min_new_tokens": 5},
            "min_new_tokens must be in [0, max_new_tokens(4)], got 5.",
        ),
        ({"n": 0}, "n must be at least 1"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"ignore_eos": 1}, "ignore_eos must be a boolean"),
        ({"stop": 5}, "stop must be a string or a list of strings"),
        ({"stop_token_ids": [V]}, "stop_token_ids must lie in [0, 4096)"),
        ({"logit_bias": {"99999": 1.0}}, "logit_bias key 99999 is out of the vocabulary"),
        ({"regex": "a+", "json_schema": "{}"}, "Only one of regex, json_schema, or ebnf can be set."),
        ({"regex": "a+"}, "not supported by the eaglefeed stand-in"),
    ],
)
def test_invalid_values_raise_value_errors(raw, message):
    with pytest.raises(SamplingParamsError) as info:
        parse(raw)
    assert isinstance(info.value, ValueError)
    assert message in str(info.value)


def test_unknown_key_is_a_type_error_like_sglang():
    with pytest.raises(UnknownSamplingParamError, match="unexpected keyword argument 'seed'"):
        parse({"seed": 1})
    assert not issubclass(UnknownSamplingParamError, ValueError)


def test_stop_forms_and_seed():
    params = parse({"stop": "END", "stop_token_ids": [5, None, 5, 7], "sampling_seed": 3})
    assert params.stop == ("END",)
    assert params.stop_token_ids == (5, 7)
    assert params.sampling_seed == 3
    assert parse({"stop": ["a", "b"]}).stop == ("a", "b")


def test_cache_does_not_confuse_equal_values_of_other_types():
    assert parse({"ignore_eos": True}).ignore_eos is True
    with pytest.raises(SamplingParamsError):
        parse({"ignore_eos": 1})
    assert parse({"max_new_tokens": 5.0}).max_new_tokens == 5
