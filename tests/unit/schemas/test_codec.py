import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglefeed.core.errors import CorruptRecordError, SchemaError, UnknownSchemaError
from eaglefeed.schemas import DEAD_LETTER, GENERATION, PROMPT, AvroCodec, load_schema, schema_fingerprint

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def prompt_record(**over):
    record = {
        "prompt_id": "p1", "source": "file.jsonl", "source_row": "7", "turn_index": 0,
        "input_ids": [1, 2, 3], "num_samples": 2,
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                            "min_p": 0.0, "stop_token_ids": [2], "seed": 5},
        "chat_template_kwargs": '{"enable_thinking": false}', "tokenizer_id": "demo",
        "tokenizer_hash": "a" * 64, "chat_template_hash": "b" * 64, "created_at": 1_700_000_000_000,
        "conversation": None, "model": None,
    }
    record.update(over)
    return record


def test_fingerprint_matches_avro_spec_vector():
    # Avro's reference vector: the CRC-64-AVRO fingerprint of "int" is 8247732601305521295.
    assert schema_fingerprint("int") == (8247732601305521295).to_bytes(8, "little")


def test_message_starts_with_single_object_header():
    data = PROMPT.encode(prompt_record())
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == PROMPT.fingerprint


@given(ids=st.lists(INT32, max_size=300), row=st.text(max_size=50), samples=st.integers(1, 64))
@settings(max_examples=200)
def test_prompt_round_trip(ids, row, samples):
    record = prompt_record(input_ids=ids, source_row=row, num_samples=samples)
    assert PROMPT.decode(PROMPT.encode(record)) == record


def generation_record(**over):
    return {
        "id": "p:0", "prompt_id": "p", "sample_index": 0, "prompt_ids": [1], "output_ids": [5, 2],
        "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 1, "completion_tokens": 2,
        "cached_tokens": 0, "latency_seconds": 0.5, "endpoint": "http://x", "model_path": "m",
        "engine_version": "v", "engine": "sglang", "worker_id": "w", "source": "s", "source_row": "1",
        "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
        "conversation": None, "capped_at": None, "weight_version": None, "seeded": None,
        "hidden_states": None,
        **over,
    }


@given(matched=st.one_of(st.none(), st.integers(0, 2**40), st.text(max_size=10)))
def test_generation_matched_stop_union(matched):
    record = generation_record(matched_stop=matched)
    assert GENERATION.decode(GENERATION.encode(record)) == record


@given(garbage=st.binary(max_size=200))
@settings(max_examples=300)
def test_garbage_is_a_clear_error_never_a_crash(garbage):
    for codec in (PROMPT, GENERATION, DEAD_LETTER):
        try:
            codec.decode(garbage)
        except SchemaError:
            pass


@given(cut=st.integers(min_value=0, max_value=60))
def test_truncated_message_is_corrupt(cut):
    data = PROMPT.encode(prompt_record())
    with pytest.raises(SchemaError):
        PROMPT.decode(data[: len(data) - 1 - cut])


def test_unknown_fingerprint_and_missing_marker():
    data = PROMPT.encode(prompt_record())
    with pytest.raises(UnknownSchemaError):
        PROMPT.decode(data[:2] + b"\x00" * 8 + data[10:])
    with pytest.raises(CorruptRecordError):
        PROMPT.decode(b"\x00\x01" + data[2:])
    with pytest.raises(UnknownSchemaError):
        GENERATION.decode(data)  # a prompt is not a generation: unknown writer for this codec


def test_encode_rejects_wrong_record():
    with pytest.raises(SchemaError):
        PROMPT.encode(prompt_record(input_ids="not a list"))


def test_records_of_an_older_schema_version_stay_readable():
    """Schema evolution: v1 gains a field with a default; v0 records still decode."""
    v1 = load_schema("history/prompt/v1.avsc")
    v0 = copy.deepcopy(v1)
    v0["fields"] = [f for f in v0["fields"] if f["name"] != "num_samples"]
    old_writer = AvroCodec(v0)
    old = prompt_record()
    del old["num_samples"]
    reader = AvroCodec(v1, older_schemas=(v0,))
    decoded = reader.decode(old_writer.encode(old))
    assert decoded["num_samples"] == 1  # the default of the new field
    assert decoded["input_ids"] == old["input_ids"]
    with pytest.raises(UnknownSchemaError):
        AvroCodec(v1).decode(old_writer.encode(old))


@given(ids=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50), as_array=st.booleans())
def test_packed_ids_round_trip_from_lists_and_arrays(ids, as_array):
    import numpy as np

    from eaglefeed.schemas.codec import pack_ids

    packed = pack_ids(np.asarray(ids, np.int64) if as_array else ids)
    assert packed == np.asarray(ids, "<i4").tobytes()
    record = generation_record(prompt_ids=ids)
    assert GENERATION.decode(GENERATION.encode(record))["prompt_ids"] == ids


@pytest.mark.parametrize("ids", [[2**31], [-(2**31) - 1], [1.5], ["1"], "abc", 7])
def test_ids_that_are_not_int32_cannot_be_encoded(ids):
    with pytest.raises(SchemaError):
        GENERATION.encode(generation_record(prompt_ids=ids))
