import io

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglefeed.schemas import GENERATION, codec_for, load_schema
from eaglefeed.schemas.codec import HEADER_LEN
from eaglefeed.schemas.columnar import GenerationBatch, decode_generations

V1 = codec_for("generation", 1)  # int arrays, no engine field
V2 = codec_for("generation", 2)  # packed ids, no conversation field
WRITERS = pytest.mark.parametrize("writer", [GENERATION, V2, V1], ids=["v3", "v2", "v1"])
INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=12)

records = st.fixed_dictionaries({
    "id": TEXT, "prompt_id": TEXT, "sample_index": INT32,
    "prompt_ids": st.lists(INT32 | st.integers(0, 300), max_size=40),
    "output_ids": st.lists(INT32 | st.integers(0, 300), max_size=40),
    "finish_reason": TEXT, "matched_stop": st.none() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    "prompt_tokens": INT32, "completion_tokens": INT32, "cached_tokens": INT32,
    "latency_seconds": st.floats(allow_nan=False), "endpoint": TEXT, "model_path": TEXT,
    "engine_version": TEXT, "engine": TEXT, "worker_id": TEXT, "source": TEXT, "source_row": TEXT,
    "turn_index": INT32,
    "sampling_params": TEXT, "chat_template_kwargs": TEXT, "tokenizer_id": TEXT, "tokenizer_hash": TEXT,
    "chat_template_hash": TEXT, "prompt_created_at": st.integers(0, 2**62),
    "created_at": st.integers(0, 2**62), "conversation": st.none() | TEXT,
})


def base():
    return {"id": "p:0", "prompt_id": "p", "sample_index": 0, "prompt_ids": [1], "output_ids": [2],
            "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": 1, "completion_tokens": 1,
            "cached_tokens": 0, "latency_seconds": 0.5, "endpoint": "e", "model_path": "m",
            "engine_version": "v", "worker_id": "w", "source": "s", "source_row": "1", "turn_index": 0,
            "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h",
            "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2}


def as_codec_would(values):
    """(position, record) of every message the codec decodes, as a batch."""
    good = []
    for i, value in enumerate(values):
        try:
            record = GENERATION.decode(value)
            GenerationBatch.from_records([record])
        except Exception:  # noqa: BLE001 - the reference decoder's verdict
            continue
        good.append((i, record))
    return good


def _nan_equal(rows):
    """Rows with each NaN as one marker: a flipped bit can make a double NaN, and NaN != NaN."""
    return [{k: "NaN" if isinstance(v, float) and v != v else v for k, v in row.items()} for row in rows]


def assert_same(decoded, reference):
    assert decoded.index == [i for i, _ in reference]
    expected = GenerationBatch.from_records([r for _, r in reference])
    assert _nan_equal(decoded.batch.rows) == _nan_equal(expected.rows)
    assert np.array_equal(decoded.batch.prompt_len, expected.prompt_len)
    assert np.array_equal(decoded.batch.output_len, expected.output_len)
    assert decoded.batch.tokens.dtype == np.int32
    assert np.array_equal(decoded.batch.tokens, expected.tokens)


@WRITERS
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=80))
def test_fast_decoding_equals_the_codec(writer, recs):
    values = [writer.encode(r) for r in recs]
    decoded = decode_generations(values)
    assert decoded.errors == []
    assert_same(decoded, as_codec_would(values))


@WRITERS
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_damaged_messages_are_reported_and_never_decode_differently(writer, recs, data):
    values = [writer.encode(r) for r in recs]
    for i in range(len(values)):
        how = data.draw(st.sampled_from(["keep", "cut", "flip", "append", "garbage"]))
        body = bytearray(values[i])
        if how == "cut":
            body = body[:data.draw(st.integers(0, len(body) - 1))]
        elif how == "flip":
            pos = data.draw(st.integers(HEADER_LEN, len(body) - 1))
            body[pos] ^= data.draw(st.integers(1, 255))
        elif how == "append":
            body += b"\x00"
        elif how == "garbage":
            body = bytearray(data.draw(st.binary(max_size=30)))
        values[i] = bytes(body)
    decoded = decode_generations(values)
    reference = as_codec_would(values)
    ok = {i for i, _ in reference}
    # whatever decodes fast must decode identically with the codec; failures are reported by position
    assert set(decoded.index) <= ok
    assert_same(decoded, [(i, r) for i, r in reference if i in set(decoded.index)])
    assert sorted(decoded.index + [i for i, _ in decoded.errors]) == list(range(len(values)))


def test_arrays_in_several_blocks_with_byte_sizes_decode_like_the_codec():
    rec = base()
    rec.update(prompt_ids=[1, -2, 300000, 2**31 - 1], output_ids=[-(2**31), 7])
    fields = load_schema("history/generation/v1.avsc")["fields"]
    head = fastavro.parse_schema({"type": "record", "name": "H", "fields": fields[:3]})
    tail = fastavro.parse_schema({"type": "record", "name": "T", "fields": fields[5:]})
    buf = io.BytesIO()
    buf.write(V1.encode(rec)[:HEADER_LEN])
    fastavro.schemaless_writer(buf, head, rec)
    # prompt_ids: a block of 2 stating its byte size (negative count), then a plain block of 2
    first = _varints(_zigzag(v) for v in rec["prompt_ids"][:2])
    buf.write(_varints([_zigzag(-2), _zigzag(len(first))]) + first)
    buf.write(_varints([_zigzag(2)]) + _varints(_zigzag(v) for v in rec["prompt_ids"][2:]) + b"\x00")
    buf.write(_varints([_zigzag(2)]) + _varints(_zigzag(v) for v in rec["output_ids"]) + b"\x00")
    fastavro.schemaless_writer(buf, tail, rec)
    value = buf.getvalue()
    decoded = decode_generations([value, GENERATION.encode(rec)])
    assert decoded.errors == []
    assert_same(decoded, as_codec_would([value, GENERATION.encode(rec)]))
    assert decoded.batch.tokens[:6].tolist() == rec["prompt_ids"] + rec["output_ids"]


def test_an_id_beyond_32_bits_is_an_error_not_a_wrapped_value():
    rec = base()
    rec.update(prompt_ids=[5], output_ids=[6])
    value = V1.encode(rec)
    item = _varints([_zigzag(5)])
    big = _varints([_zigzag(2**33)])  # a 5-byte varint with bits above 32
    at = value.index(b"\x02" + item + b"\x00")  # block count 1, the item, the end marker
    forged = value[:at] + b"\x02" + big + value[at + 1 + len(item):]
    decoded = decode_generations([forged, value])
    assert decoded.index == [1] and [i for i, _ in decoded.errors] == [0]
    assert "32-bit" in str(decoded.errors[0][1])


def test_v1_and_v2_messages_of_one_chunk_give_the_same_rows_in_message_order():
    recs = [base() for _ in range(6)]
    for n, r in enumerate(recs):
        r.update(id=str(n), prompt_ids=list(range(n + 1)), output_ids=[7, n])
    values = [(V1 if n % 2 else GENERATION).encode(r) for n, r in enumerate(recs)]
    decoded = decode_generations([*values, b"junk"])
    assert decoded.index == list(range(6)) and [i for i, _ in decoded.errors] == [6]
    assert_same(decoded, as_codec_would(values))
    assert {r["engine"] for r in decoded.batch.rows} == {""}  # v1's default; base() has no engine


def test_v2_packs_ids_as_little_endian_int32():
    rec = base()
    rec.update(prompt_ids=[1, 2**31 - 1], output_ids=[-1])
    value = GENERATION.encode(rec)
    assert np.array([1, 2**31 - 1, -1], "<i4").tobytes()[:8] in value
    assert GENERATION.decode(value)["prompt_ids"] == [1, 2**31 - 1]


def test_select_and_concat_keep_rows_and_ids_together():
    recs = [base() for _ in range(5)]
    for n, r in enumerate(recs):
        r.update(prompt_ids=[n] * (n + 1), output_ids=[100 + n] * 2, id=str(n))
    batch = decode_generations([GENERATION.encode(r) for r in recs]).batch
    picked = batch.select([3, 0])
    assert [r["id"] for r in picked.rows] == ["3", "0"]
    assert picked.tokens.tolist() == [3, 3, 3, 3, 103, 103, 0, 100, 100]
    both = GenerationBatch.concat([picked, batch.select([])])
    assert both.offsets.tolist() == [0, 6, 9]


def _zigzag(v):
    return (v << 1) ^ (v >> 63)


def _varints(values):
    out = bytearray()
    for v in values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def test_v2_and_v3_messages_of_one_chunk_fill_the_conversation_default():
    recs = [base() for _ in range(4)]
    for n, r in enumerate(recs):
        r.update(id=str(n), conversation='{"conversation_id": "c"}' if n % 2 == 0 else None)
    values = [(GENERATION if n % 2 == 0 else V2).encode(r) for n, r in enumerate(recs)]
    decoded = decode_generations(values)
    assert [r["conversation"] for r in decoded.batch.rows] == ['{"conversation_id": "c"}', None] * 2
    assert_same(decoded, as_codec_would(values))
