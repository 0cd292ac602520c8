"""Checking a hidden-state object in the store by ranged reads gives what checking the file gives."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import HiddenStatesError
from eaglefeed.dataset.state_files.write import write_file
from eaglefeed.dataset.store import ObjectStore, parse
from eaglefeed.dataset.store import states as store_states
from tests.fakes.s3 import FakeS3

URI = "s3://bucket/ds"


def _stored(tmp_path, s3: FakeS3, tokens: int, dtype: str = "bfloat16", *, cut: int = 0,
            sha: bool = True, name: str = "r.safetensors"):
    path = tmp_path / name
    states = np.linspace(-3, 3, tokens * 2 * 4, dtype=np.float32).reshape(tokens, 2, 4)
    write_file(path, states=states, token_ids=list(range(5, 5 + tokens)), layer_ids=(1, 3),
               num_hidden_layers=4, dtype=dtype)
    data = path.read_bytes()[:len(path.read_bytes()) - cut]
    meta = {"sha256": hashlib.sha256(data).hexdigest()} if sha else {}
    s3.put("bucket", f"ds/hidden_states/{name}", data, meta)
    store = ObjectStore(parse(URI), client=s3)
    stored = store.head(f"hidden_states/{name}")
    assert stored is not None
    return store, stored, path


@settings(max_examples=30, deadline=None)
@given(tokens=st.integers(1, 300), first_read=st.sampled_from([8, 64, 300, 65536]),
       dtype=st.sampled_from(["bfloat16", "float32", "float8_e4m3fn"]))
def test_a_ranged_check_gives_the_files_reference_whatever_the_first_read_holds(
        tmp_path_factory, tokens, first_read, dtype):
    tmp_path = tmp_path_factory.mktemp("s")
    s3 = FakeS3()
    store, stored, path = _stored(tmp_path, s3, tokens, dtype)
    ids = list(range(5, 5 + tokens))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_states, "FIRST_READ", first_read)
        ref = store_states.check_stored(store, stored, token_ids=ids, layer_ids=(3, 1), dtype=dtype)
    assert ref == hidden_states.check_file(path, token_ids=ids, layer_ids=(3, 1), dtype=dtype)


@pytest.mark.parametrize(("kwargs", "ids", "says"), [
    ({}, [5, 6, 7, 9], "token_ids differ"),
    ({}, [5, 6, 7], "hidden_states of shape [4, 2, 4] for 3 positions"),
    ({"sha": False}, [5, 6, 7, 8], "no sha256 metadata"),
    ({"cut": 10}, [5, 6, 7, 8], "truncated"),
], ids=["other-ids", "other-length", "no-sha256", "truncated"])
def test_an_object_unlike_its_row_is_refused_naming_why(tmp_path, kwargs, ids, says):
    store, stored, _ = _stored(tmp_path, FakeS3(), 4, **kwargs)
    with pytest.raises(HiddenStatesError, match=says.replace("[", r"\[").replace("]", r"\]")):
        store_states.check_stored(store, stored, token_ids=ids, layer_ids=(1, 3), dtype=None)
