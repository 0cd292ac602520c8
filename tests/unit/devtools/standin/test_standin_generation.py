"""The deterministic output-token model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.core.tokenizer.markers import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from eaglefeed.devtools.standin.output.draws import Draws
from eaglefeed.devtools.standin.output.generation import OutputModel, contains_subsequence, plan_completion
from eaglefeed.devtools.standin.sampling import parse_sampling_params

PLAIN = OutputModel(
    output_len_mean=40, output_len_sigma=0.5, think_fraction=0, tool_call_fraction=0, length_fraction=0
)


def plan(vocab, prompt, raw=None, *, model=PLAIN, limit=None, sample=0):
    params = parse_sampling_params(raw, vocab_size=vocab.vocab_size)
    if limit is None:
        limit = params.max_new_tokens if params.max_new_tokens is not None else 1000
    return plan_completion(
        vocab=vocab, model=model, input_ids=prompt, params=params, max_new_tokens=limit, sample_index=sample
    )


def tid(vocab, token):
    token_id = vocab.tokenizer.token_to_id(token)
    assert token_id is not None
    return token_id


PROMPT = [1, 300, 301, 302, 2, 1, 400, 401]


def test_ends_with_eos_included_in_output(vocab):
    result = plan(vocab, PROMPT)
    assert result.output_ids[-1] == vocab.eos_id == tid(vocab, "<|im_end|>")
    assert result.finish_reason == {"type": "stop", "matched": vocab.eos_id}
    assert all(token_id in vocab.normal_ids for token_id in result.output_ids[:-1])


def test_deterministic_and_seed_sensitive(vocab):
    assert plan(vocab, PROMPT, {"sampling_seed": 1}) == plan(vocab, PROMPT, {"sampling_seed": 1})
    assert (
        plan(vocab, PROMPT, {"sampling_seed": 1}).output_ids
        != plan(vocab, PROMPT, {"sampling_seed": 2}).output_ids
    )
    assert plan(vocab, PROMPT).output_ids != plan(vocab, PROMPT + [7]).output_ids
    assert plan(vocab, PROMPT, sample=0).output_ids != plan(vocab, PROMPT, sample=1).output_ids


def test_greedy_ignores_sample_index_and_seed(vocab):
    first = plan(vocab, PROMPT, {"temperature": 0, "sampling_seed": 1}, sample=0)
    assert first == plan(vocab, PROMPT, {"temperature": 0, "sampling_seed": 9}, sample=3)


def test_length_finish_and_prefix_property(vocab):
    full = plan(vocab, PROMPT, {"ignore_eos": True}, limit=300)
    short = plan(vocab, PROMPT, {"ignore_eos": True}, limit=7)
    assert short.finish_reason == {"type": "length", "length": 7}
    assert short.output_ids == full.output_ids[:7]
    assert len(full.output_ids) == 300 and full.finish_reason == {"type": "length", "length": 300}


def test_a_stop_token_landing_on_the_limit_is_a_stop_finish_as_sglang_checks_stops_first(vocab):
    """SGLang 0.5.23 ``Req.update_finish_state``: stop strings, then stop ids, then the length."""
    natural = plan(vocab, PROMPT, limit=1000)
    size = len(natural.output_ids)
    assert natural.finish_reason["type"] == "stop"
    assert plan(vocab, PROMPT, limit=size) == natural
    assert plan(vocab, PROMPT, limit=size - 1).finish_reason == {"type": "length", "length": size - 1}


def test_zero_max_new_tokens(vocab):
    result = plan(vocab, PROMPT, {"max_new_tokens": 0})
    assert result.output_ids == [] and result.finish_reason == {"type": "length", "length": 0}


def test_stop_token_ids_first_occurrence_wins(vocab):
    natural = plan(vocab, PROMPT, limit=1000).output_ids
    target = natural[5]
    first = natural.index(target)
    result = plan(vocab, PROMPT, {"stop_token_ids": [target]}, limit=1000)
    assert result.output_ids == natural[: first + 1]
    assert result.finish_reason == {"type": "stop", "matched": target}


def test_stop_token_id_ends_the_output_when_given(vocab):
    endoftext = tid(vocab, "<|endoftext|>")
    result = plan(vocab, PROMPT, {"stop_token_ids": [endoftext]}, limit=1000)
    assert result.output_ids[-1] == endoftext
    assert result.finish_reason == {"type": "stop", "matched": endoftext}


def test_min_new_tokens_delays_the_stop(vocab):
    natural = plan(vocab, PROMPT, limit=1000)
    wanted = len(natural.output_ids) + 20
    result = plan(vocab, PROMPT, {"min_new_tokens": wanted}, limit=1000)
    assert len(result.output_ids) == wanted + 1 and result.output_ids[-1] == vocab.eos_id


def test_ignore_eos_disables_stop_ids(vocab):
    result = plan(vocab, PROMPT, {"ignore_eos": True, "stop_token_ids": [0]}, limit=50)
    assert result.finish_reason == {"type": "length", "length": 50}
    assert vocab.eos_id not in result.output_ids


def test_stop_string_cuts_at_the_completing_token(vocab):
    natural = plan(vocab, PROMPT, limit=1000).output_ids
    piece = vocab.decode(natural[10:12], skip_special_tokens=False).strip()
    assert piece
    result = plan(vocab, PROMPT, {"stop": [piece]}, limit=1000)
    assert result.finish_reason == {"type": "stop", "matched": piece}
    ids = result.output_ids
    assert ids == natural[: len(ids)]
    assert piece in vocab.decode(ids, skip_special_tokens=False)
    assert piece not in vocab.decode(ids[:-1], skip_special_tokens=False)


def test_think_block_unless_thinking_disabled(vocab):
    model = OutputModel(output_len_mean=30, think_fraction=1.0, tool_call_fraction=0, length_fraction=0)
    think, end_think = tid(vocab, THINK_START), tid(vocab, THINK_END)
    result = plan(vocab, PROMPT, model=model, limit=1000).output_ids
    assert result[0] == think and end_think in result
    newline = vocab.tokenizer.encode("\n\n", add_special_tokens=False).ids
    disabled = PROMPT + [think, *newline, end_think, *newline]
    assert think not in plan(vocab, disabled, model=model, limit=1000).output_ids
    opened = PROMPT + [think, *vocab.newline_ids]
    forced = plan(vocab, opened, model=model, limit=1000).output_ids
    assert think not in forced and end_think in forced


def test_tool_calls_only_for_tool_prompts(vocab):
    model = OutputModel(output_len_mean=30, think_fraction=0, tool_call_fraction=1.0, length_fraction=0)
    start, end = tid(vocab, TOOL_CALL_START), tid(vocab, TOOL_CALL_END)
    plain = plan(vocab, PROMPT, model=model, limit=1000).output_ids
    assert start not in plain
    with_tools = vocab.tokenizer.encode("You may call <tools>[]</tools>", add_special_tokens=False).ids
    calls = plan(vocab, PROMPT + with_tools, model=model, limit=1000).output_ids
    assert calls[0] == start and end in calls and calls[-1] == vocab.eos_id
    text = vocab.decode(calls, skip_special_tokens=False)
    assert '"name"' in text and '"arguments"' in text
    assert start in plan(vocab, PROMPT + [start], model=model, limit=1000).output_ids


def test_length_fraction_runs_to_the_limit(vocab):
    model = OutputModel(output_len_mean=5, think_fraction=0, tool_call_fraction=0, length_fraction=1.0)
    result = plan(vocab, PROMPT, model=model, limit=128)
    assert result.finish_reason == {"type": "length", "length": 128} and len(result.output_ids) == 128


def test_contains_subsequence():
    assert contains_subsequence([1, 2, 3, 2, 4], (2, 4))
    assert not contains_subsequence([1, 2, 3], (3, 4))
    assert not contains_subsequence([1], ())


def test_draws_are_uniform_and_reproducible():
    first = Draws(b"k")
    values = [first.random() for _ in range(2000)]
    again = Draws(b"k")
    assert values == [again.random() for _ in range(2000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.45 < sum(values) / len(values) < 0.55
    assert Draws(b"k").random() != Draws(b"j").random()


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.lists(st.integers(min_value=9, max_value=4095), min_size=1, max_size=40),
    limit=st.integers(min_value=0, max_value=300),
    min_new=st.integers(min_value=0, max_value=50),
    ignore_eos=st.booleans(),
)
def test_invariants(vocab, prompt, limit, min_new, ignore_eos):
    raw = {"min_new_tokens": min(min_new, limit), "ignore_eos": ignore_eos}
    result = plan(vocab, prompt, raw, limit=limit)
    ids, finish = result.output_ids, result.finish_reason
    assert len(ids) <= limit
    if finish["type"] == "length":
        assert finish["length"] == limit == len(ids)
    else:
        assert not ignore_eos and finish["matched"] == ids[-1] == vocab.eos_id
        assert len(ids) > raw["min_new_tokens"]


@pytest.mark.parametrize("mean", [10, 200])
def test_mean_length_roughly_follows_the_knob(vocab, mean):
    model = OutputModel(
        output_len_mean=mean, output_len_sigma=0.3, think_fraction=0, tool_call_fraction=0, length_fraction=0
    )
    lengths = [len(plan(vocab, [9 + i], model=model, limit=5000).output_ids) for i in range(200)]
    assert 0.8 * mean < sum(lengths) / len(lengths) < 1.25 * mean + 1
