"""The record validity rules: the per-record and the vectorised form agree, with the sink's reasons."""

from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.schemas import GENERATION
from eaglefeed.schemas.columnar import GenerationBatch, decode_generations
from eaglefeed.schemas.validity import invalid_rows, record_problem, token_problem


def gen(i, *, prompt=(1, 2), output=(7, 8, 2), completion=None, prompt_tokens=None, rid=None):
    return {
        "id": f"p{i}:0" if rid is None else rid, "prompt_id": f"p{i}", "sample_index": 0,
        "prompt_ids": list(prompt), "output_ids": list(output), "finish_reason": "stop", "matched_stop": 2,
        "prompt_tokens": len(prompt) if prompt_tokens is None else prompt_tokens,
        "completion_tokens": len(output) if completion is None else completion, "cached_tokens": 0,
        "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v", "worker_id": "w",
        "source": "s", "source_row": str(i), "turn_index": 0, "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h",
        "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


def batch_of(records):
    return decode_generations([GENERATION.encode(r) for r in records]).batch


def test_each_rule_names_its_reason_in_the_sinks_words():
    recs = [gen(0, rid=""), gen(1, output=()), gen(2, output=(5, -1)), gen(3, completion=1),
            gen(4, prompt=()), gen(5, prompt_tokens=7), gen(6, prompt=(-3, 1)), gen(7)]
    assert invalid_rows(batch_of(recs)) == [
        (0, "empty id"), (1, "empty output"), (2, "negative token id"),
        (3, "completion_tokens 1 != 3 output ids"), (4, "empty prompt"),
        (5, "prompt_tokens 7 != 2 prompt ids"), (6, "negative token id")]
    reasons = [reason for _, reason in invalid_rows(batch_of(recs))]
    assert [record_problem(r) for r in recs] == [*reasons, None]


def test_an_empty_batch_has_no_invalid_rows():
    assert invalid_rows(GenerationBatch.empty()) == []


def test_token_rules_take_the_servers_counts_as_they_come():
    assert token_problem(prompt_ids=[1], output_ids=[2], prompt_tokens=1, completion_tokens=1) is None
    assert token_problem(prompt_ids=[1], output_ids=[2], prompt_tokens=1,
                         completion_tokens=None) == "completion_tokens None != 1 output ids"


ids = st.lists(st.integers(-3, 50), max_size=6)


@st.composite
def records(draw, i):
    prompt, output = draw(ids), draw(ids)
    return gen(i, prompt=prompt, output=output, rid=draw(st.sampled_from(["", f"p{i}:0"])),
               completion=draw(st.sampled_from([len(output), len(output) + 1, 0])),
               prompt_tokens=draw(st.sampled_from([len(prompt), len(prompt) - 1])))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12).flatmap(lambda n: st.tuples(*(records(i) for i in range(n)))))
def test_the_vectorised_form_finds_exactly_what_the_per_record_form_rejects(recs):
    expected = [(i, record_problem(r)) for i, r in enumerate(recs) if record_problem(r) is not None]
    assert invalid_rows(batch_of(list(recs))) == expected
