"""SGLang's aux hidden states in a response: taken only when they cover exactly prompt + output[:-1]."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.consumers.generate.inference.aux_states import aux_states
from eaglefeed.core.errors import RetryableInferenceError


def meta(prompt: int, output: int, width: int = 6, **extra):
    block = [[float(p * 10 + w) for w in range(width)] for p in range(prompt)]
    rows = [[float(-(r + 1))] * width for r in range(output - 1)]
    return {"hidden_states": [block, *rows], "cached_tokens": 0, "num_retractions": 0, **extra}


@given(prompt=st.integers(1, 40), output=st.integers(1, 20), width=st.integers(1, 12))
def test_whole_states_are_one_array_of_prompt_plus_output_but_the_last(prompt, output, width):
    states = aux_states(meta(prompt, output, width), prompt_len=prompt, output_len=output)
    assert states.shape == (prompt + output - 1, width) and states.dtype == np.float32
    assert states[prompt - 1, width - 1] == (prompt - 1) * 10 + width - 1
    if output > 1:
        assert states[-1, 0] == -(output - 1)


@pytest.mark.parametrize(("info", "prompt", "output", "says"), [
    (meta(5, 3, cached_tokens=4), 9, 3, "5 of 9 prompt positions (4 from its prefix cache)"),
    (meta(9, 2), 9, 3, "1 decode rows for 3 output ids"),
    (meta(9, 3, num_retractions=1), 9, 3, "retracted 1 times"),
    ({"cached_tokens": 0}, 9, 3, "no meta_info.hidden_states"),
    ({"hidden_states": [[[1.0, 2.0], [3.0]]]}, 2, 1, "ragged"),
], ids=["prefix-cache", "rows", "retraction", "absent", "ragged"])
def test_states_that_are_not_whole_fail_the_attempt_with_the_reason(info, prompt, output, says):
    with pytest.raises(RetryableInferenceError) as err:
        aux_states(info, prompt_len=prompt, output_len=output)
    assert err.value.kind == "hidden_states" and says in str(err.value)
