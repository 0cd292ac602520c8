"""Parsing /generate bodies: batch detection, rids, context checks, error classes."""

from __future__ import annotations

import json

import pytest

from eaglefeed.devtools.standin.parsing import BadRequestError, InvalidRequestError, load_body, parse_generate
from eaglefeed.devtools.standin.sampling import UnknownSamplingParamError


def parse(vocab, obj, context=100):
    return parse_generate(obj, vocab=vocab, context_length=context)


def test_single_request(vocab):
    req = parse(vocab, {"input_ids": [1, 2, 3], "rid": "r"})
    assert req.is_single and req.n == 1 and not req.stream
    assert [(i.input_ids, i.rid, i.max_new_tokens) for i in req.items] == [([1, 2, 3], "r", 95)]


def test_default_max_new_tokens_is_128_and_clamped_silently(vocab):
    assert parse(vocab, {"input_ids": [1]}, context=1000).items[0].max_new_tokens == 128
    assert parse(vocab, {"input_ids": [1] * 10}, context=100).items[0].max_new_tokens == 88
    assert (
        parse(vocab, {"input_ids": [1], "sampling_params": {"max_new_tokens": None}}, context=50)
        .items[0]
        .max_new_tokens
        == 47
    )


def test_batch_with_string_rid_and_param_list(vocab):
    req = parse(
        vocab,
        {
            "input_ids": [[1], [2, 3]],
            "rid": "job",
            "sampling_params": [{"max_new_tokens": 1}, {"max_new_tokens": 2}],
        },
    )
    assert not req.is_single
    assert [i.rid for i in req.items] == ["job_0", "job_1"]
    assert [i.max_new_tokens for i in req.items] == [1, 2]


def test_n_makes_a_list_even_for_one_prompt(vocab):
    req = parse(vocab, {"input_ids": [1, 2], "sampling_params": {"n": 3}})
    assert req.n == 3 and not req.is_single


@pytest.mark.parametrize(
    ("obj", "error", "message"),
    [
        ({}, InvalidRequestError, "Either text, input_ids or input_embeds should be provided."),
        ({"input_ids": []}, InvalidRequestError, "input_ids cannot be empty."),
        ({"input_ids": [[1], []]}, InvalidRequestError, "input_ids cannot be empty."),
        ({"input_ids": "abc"}, BadRequestError, "input_ids"),
        ({"input_ids": [1, "a"]}, BadRequestError, "input_ids"),
        ({"input_ids": [1.5]}, BadRequestError, "input_ids"),
        ({"input_ids": [99999]}, InvalidRequestError, "outside the vocabulary"),
        ({"input_ids": [[1], [2]], "rid": ["a", "a"]}, InvalidRequestError, "Duplicate request IDs detected"),
        ({"input_ids": [[1], [2]], "rid": ["a"]}, InvalidRequestError, "same length as the batch size"),
        ({"input_ids": [1], "rid": 5}, BadRequestError, "rid"),
        ({"input_ids": [1], "stream": "yes"}, BadRequestError, "stream"),
        ({"input_ids": [1], "return_logprob": True}, InvalidRequestError, "return_logprob is not supported"),
        (
            {"input_ids": [1], "return_hidden_states": True},
            InvalidRequestError,
            "--enable-return-hidden-states",
        ),
        (
            {"input_ids": [[1], [2]], "sampling_params": [{}]},
            InvalidRequestError,
            "does not match the batch size",
        ),
        (
            {"input_ids": [[1], [2]], "sampling_params": [{"n": 1}, {"n": 2}]},
            InvalidRequestError,
            "parallel_sample_num",
        ),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, ValueError, "top_p must be in (0, 1]"),
        ({"input_ids": [1], "sampling_params": {"seed": 1}}, UnknownSamplingParamError, "seed"),
    ],
)
def test_errors(vocab, obj, error, message):
    with pytest.raises(error) as info:
        parse(vocab, obj)
    assert message in str(info.value)


def test_context_length_errors_use_sglang_messages(vocab):
    with pytest.raises(InvalidRequestError) as info:
        parse(vocab, {"input_ids": [1] * 100}, context=100)
    assert str(info.value) == "The input (100 tokens) is longer than the model's context length (100 tokens)."
    with pytest.raises(InvalidRequestError) as info:
        parse(vocab, {"input_ids": [1] * 90, "sampling_params": {"max_new_tokens": 20}}, context=100)
    assert str(info.value).startswith(
        "Requested token count exceeds the model's maximum context length of 100 tokens. "
        "You requested a total of 110 tokens: 90 tokens from the input messages and 20 tokens "
        "for the completion."
    )
    # accepted (90 + 10 = the context), then the scheduler's cap: max_req_len (99) - 90 - 1
    assert (
        parse(vocab, {"input_ids": [1] * 90, "sampling_params": {"max_new_tokens": 10}})
        .items[0]
        .max_new_tokens
        == 8
    )
    with pytest.raises(InvalidRequestError) as info:  # within six tokens of the context
        parse(vocab, {"input_ids": [1] * 94, "sampling_params": {"max_new_tokens": 1}})
    assert str(info.value) == ("Input length (94 tokens) exceeds the maximum allowed length (94 tokens). "
                               "Use a shorter input or enable --allow-auto-truncate.")
    item, = parse(vocab, {"input_ids": [1] * 93, "sampling_params": {"max_new_tokens": 1}}).items
    assert item.max_new_tokens == 1


def test_text_is_tokenized(vocab):
    req = parse(vocab, {"text": ["hello world", "bye"]})
    assert req.items[0].input_ids == vocab.encode("hello world")
    assert not req.is_single


def test_load_body_rejects_malformed_json():
    with pytest.raises(BadRequestError, match="JSON decode error"):
        load_body(b"{nope")
    with pytest.raises(BadRequestError):
        load_body(json.dumps([1, 2]).encode())
    assert load_body(b'{"a": 1}') == {"a": 1}


def test_preferred_sampling_params_apply_under_the_request_as_sglang_merges_them(vocab):
    preferred = {"repetition_penalty": 1.3, "min_new_tokens": 4, "temperature": 0.2}
    req = parse_generate({"input_ids": [1], "sampling_params": {"temperature": 0.7, "max_new_tokens": 9}},
                         vocab=vocab, context_length=100, preferred=preferred)
    params = req.items[0].params
    assert (params.repetition_penalty, params.min_new_tokens, params.temperature) == (1.3, 4, 0.7)
    sent = {"temperature": 0.7, "max_new_tokens": 9, "repetition_penalty": 1.0, "min_new_tokens": 0}
    params = parse_generate({"input_ids": [1], "sampling_params": sent}, vocab=vocab, context_length=100,
                            preferred=preferred).items[0].params
    assert (params.repetition_penalty, params.min_new_tokens) == (1.0, 0)
