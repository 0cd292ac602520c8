"""Responses and records that do not fit the contract end as dead letters, never as crashes."""

import pytest

from eaglefeed.consumers.generate.inference.integrity import check_response
from eaglefeed.core.errors import RetryableInferenceError
from eaglefeed.dataset.markers import flag_markers_for
from eaglefeed.schemas import DEAD_LETTER
from eaglefeed.schemas.deadletter import dead_letter


def body(**meta):
    base = {"finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 3, "completion_tokens": 2,
            "cached_tokens": 0}
    base.update(meta)
    return {"output_ids": [7, 2], "meta_info": base}


@pytest.mark.parametrize("meta", [
    {"cached_tokens": "many"},
    {"cached_tokens": 99},
    {"cached_tokens": 1.5},
    {"finish_reason": {"type": "stop", "matched": [2]}},
])
def test_malformed_meta_info_is_a_retryable_integrity_error(meta):
    with pytest.raises(RetryableInferenceError) as err:
        check_response(body(**meta), [1, 2, 3], {"max_new_tokens": 8}, endpoint="e", latency=0.0)
    assert err.value.kind == "integrity"


def test_dead_letter_survives_unencodable_text():
    value = dead_letter(stage="generate", kind="http_400", message="bad \ud800 surrogate")
    assert "surrogate" in DEAD_LETTER.decode(value)["message"]


@pytest.mark.parametrize("tokenizer_id", ["x" * 5000, "a\x00b", ""])
def test_markers_of_an_impossible_tokenizer_id_are_unknown_not_an_error(tokenizer_id):
    marks = flag_markers_for(tokenizer_id)
    assert marks.reasoning is None and marks.tool_call is None
