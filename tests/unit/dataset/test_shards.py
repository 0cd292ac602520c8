import json

import pyarrow.parquet as pq
import pytest

from eaglefeed.core.errors import ManifestError
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.markers import FlagMarkers, flag_markers_for
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas.columnar import GenerationBatch


def gen(i, prompt=(1, 2, 3), output=(3, 4, 2), tokenizer="t"):
    return {
        "id": f"p{i}:0", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": list(prompt),
        "output_ids": list(output), "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": len(prompt),
        "completion_tokens": len(output), "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
        "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i),
        "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": tokenizer,
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


def test_rows_are_prompt_plus_output_with_a_zero_then_one_mask():
    records = [gen(0), gen(1, prompt=(9,), output=(3, 5, 6, 2)), gen(2, tokenizer="u")]
    table = shards.batch_to_table(GenerationBatch.from_records(records),
                                  {"t": FlagMarkers(reasoning=(3,), tool_call=(5,))})
    rows = table.to_pylist()
    assert rows[0]["input_ids"] == [1, 2, 3, 3, 4, 2]
    assert rows[0]["loss_mask"] == [0, 0, 0, 1, 1, 1]
    assert rows[1]["input_ids"] == [9, 3, 5, 6, 2] and rows[1]["loss_mask"] == [0, 1, 1, 1, 1]
    assert rows[0]["prompt_len"] == 3 and rows[1]["seq_len"] == 5
    assert rows[0]["has_reasoning"] and not rows[0]["has_tool_call"] and rows[1]["has_tool_call"]
    assert rows[2]["has_reasoning"] is None  # tokenizer without known markers
    assert rows[0]["matched_stop"] == "2"
    assert table.schema.field("input_ids").type.value_type.bit_width == 32
    assert table.schema.field("loss_mask").type.value_type.bit_width == 8


def test_engine_is_copied_and_null_when_unknown():
    records = [{**gen(0), "engine": "vllm"}, {**gen(1), "engine": ""}, gen(2)]
    table = shards.batch_to_table(GenerationBatch.from_records(records))
    assert table.column("engine").to_pylist() == ["vllm", None, None]
    assert table.schema.metadata[b"eaglefeed.schema_version"] == str(shards.SCHEMA_VERSION).encode()


def test_conversation_rows_carry_their_id_mode_and_lane():
    state = {"conversation_id": "c1", "mode": "tokens", "lane": 0, "turn_index": 0}
    records = [gen(0), {**gen(1), "sample_index": 1, "conversation": json.dumps(state)},
               {**gen(2), "conversation": json.dumps({**state, "turn_index": 2, "lane": 3})},
               {**gen(3), "conversation": "not json"}]
    rows = shards.batch_to_table(GenerationBatch.from_records(records)).to_pylist()
    assert [(r["conversation_id"], r["history_mode"], r["lane"]) for r in rows] == [
        (None, "original", None), ("c1", "tokens", 1), ("c1", "tokens", 3), (None, "original", None)]


def test_rows_of_a_version_2_file_gain_the_conversation_columns_of_an_original_history_row(tmp_path):
    table = shards.batch_to_table(GenerationBatch.from_records([gen(0)]))
    v2 = table.drop_columns(["conversation_id", "history_mode", "lane"])
    with shards.ParquetFile(tmp_path, "old.parquet") as out:
        out.write(v2)
    back = pq.read_table(tmp_path / "segments" / "old.parquet")
    assert back.schema.names == shards.TRAINING_SCHEMA.names
    assert back.column("history_mode").to_pylist() == ["original"]
    assert back.column("conversation_id").to_pylist() == [None] and back.column("lane").to_pylist() == [None]


def test_rows_of_a_version_1_file_gain_a_null_engine_when_rewritten(tmp_path):
    table = shards.batch_to_table(GenerationBatch.from_records([{**gen(0), "engine": "sglang"}, gen(1)]))
    v1 = table.drop_columns(["engine"])  # a file written before the engine column existed
    with shards.ParquetFile(tmp_path, "mixed.parquet") as out:
        out.write(v1)
        out.write(table)
    back = pq.read_table(tmp_path / "segments" / "mixed.parquet")
    assert back.schema.names == shards.TRAINING_SCHEMA.names
    assert back.column("engine").to_pylist() == [None, None, "sglang", None]
    assert back.column("input_ids").to_pylist()[:2] == table.column("input_ids").to_pylist()


def test_a_marker_in_the_prompt_does_not_flag_the_row():
    batch = GenerationBatch.from_records([gen(0, prompt=(3, 1), output=(4, 2))])
    table = shards.batch_to_table(batch, {"t": FlagMarkers(reasoning=(3,))})
    assert table.column("has_reasoning").to_pylist() == [False]


def test_markers_come_from_a_local_tokenizer_json_and_unknown_ones_stay_empty(tmp_path):
    demo = flag_markers_for(str(TOKENIZER_DIR))
    assert demo.reasoning == (3, 4) and demo.tool_call == (5,)
    assert flag_markers_for(str(tmp_path / "nowhere")) == FlagMarkers()


@pytest.mark.parametrize("pair", [("<seed:think>", "</seed:think>"), ("◁think▷", "◁/think▷")],
                         ids=["seed-oss", "kimi"])
def test_every_think_spelling_of_the_table_flags_reasoning(tmp_path, pair):
    """A Seed-OSS or Kimi tokenizer's think markers flag a row as the converse stage splits it."""
    added = [{"id": 2, "content": "<|im_end|>"}, {"id": 7, "content": pair[0]}, {"id": 8, "content": pair[1]}]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": added, "model": {"vocab": {}}}),
                                             encoding="utf-8")
    flags = flag_markers_for(str(tmp_path))
    assert flags.reasoning == (7, 8) and flags.tool_call == ()
    records = [gen(0, output=(7, 3, 8, 4, 2)), gen(1, output=(3, 8, 4, 2)), gen(2, output=(3, 4, 2))]
    table = shards.batch_to_table(GenerationBatch.from_records(records), {"t": flags})
    assert table.column("has_reasoning").to_pylist() == [True, True, False]
    assert table.column("has_tool_call").to_pylist() == [False, False, False]


def test_a_think_spelling_in_the_model_vocab_only_is_found_too(tmp_path):
    vocab = {"a": 0, "<seed:think>": 11, "</seed:think>": 12, "<tool_call>": 13}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}), encoding="utf-8")
    assert flag_markers_for(str(tmp_path)) == FlagMarkers(reasoning=(11, 12), tool_call=(13,))


def test_segment_manifest_and_resume(tmp_path):
    table = shards.batch_to_table(GenerationBatch.from_records([gen(0), gen(1)]))
    name = shards.segment_name("gen", 0, 10, 11)
    entry = shards.write_segment(tmp_path, name, table)
    assert entry["rows"] == 2 and entry["tokens"] == 12 and entry["loss_tokens"] == 6
    shards.append_manifest(tmp_path, {"added": [entry], "offsets": {"gen:0": [10, 11]}})
    (tmp_path / "segments" / shards.segment_name("gen", 0, 12, 20)).write_bytes(b"half")
    (tmp_path / "segments" / f".{shards.segment_name('gen', 0, 21, 22)}.tmp").write_bytes(b"t")
    (tmp_path / "segments" / shards.segment_name("gen", 1, 0, 5)).write_bytes(b"other partition")
    with open(tmp_path / "manifest.jsonl", "a") as fh:
        fh.write('{"torn')  # a crash mid-append
    events = shards.read_manifest(tmp_path)
    live = shards.live_segments(events)
    assert list(live) == [f"segments/{name}"]
    assert shards.resume_offsets(events) == {"gen:0": 12}
    prefix = shards.segment_prefix("gen", 0)
    removed = shards.discard_uncommitted(tmp_path, manifest.ever_added(events), prefix)
    assert len(removed) == 2
    assert (tmp_path / "segments" / shards.segment_name("gen", 1, 0, 5)).exists()
    assert [pq.read_table(tmp_path / path).column("id").to_pylist() for path in live] == [["p0:0", "p1:0"]]


def test_an_append_after_a_torn_line_cuts_it_so_later_events_are_read(tmp_path):
    manifest.append_manifest(tmp_path, {"offsets": {"g:0": [0, 4]}})
    with open(tmp_path / "manifest.jsonl", "a") as fh:
        fh.write('{"offsets": {"g:0": [5, ')  # the writer died here
    manifest.append_manifest(tmp_path, {"offsets": {"g:0": [5, 9]}})
    events = manifest.read_manifest(tmp_path)
    assert [e["offsets"]["g:0"] for e in events] == [[0, 4], [5, 9]]
    assert manifest.resume_offsets(events) == {"g:0": 10}


def test_a_corrupt_complete_line_is_an_error_not_a_silent_stop(tmp_path):
    manifest.append_manifest(tmp_path, {"offsets": {}})
    with open(tmp_path / "manifest.jsonl", "a") as fh:
        fh.write("not json\n" + json.dumps({"offsets": {}}) + "\n")
    with pytest.raises(ManifestError, match=":2 "):
        manifest.read_manifest(tmp_path)


def test_expect_live_refuses_an_event_whose_inputs_are_gone(tmp_path):
    table = shards.batch_to_table(GenerationBatch.from_records([gen(0)]))
    entry = shards.write_segment(tmp_path, "a.parquet", table)
    manifest.append_manifest(tmp_path, {"added": [entry]})
    manifest.append_manifest(tmp_path, {"removed": [entry["path"]]}, expect_live=[entry["path"]])
    with pytest.raises(ManifestError, match="not live"):
        manifest.append_manifest(tmp_path, {"removed": [entry["path"]]}, expect_live=[entry["path"]])
    assert len(manifest.read_manifest(tmp_path)) == 2


def test_the_users_row_id_is_a_source_id_column_and_old_segments_compact_with_it(tmp_path):
    from eaglefeed.dataset.compact import CompactOptions, compact
    from eaglefeed.dataset.snapshot import snapshot

    old = shards.batch_to_table(GenerationBatch.from_records([_source_gen("row-7")]))
    new = shards.batch_to_table(GenerationBatch.from_records([_source_gen("row-8")]))
    assert new.column("source_id").to_pylist() == ["row-8"]
    old = old.drop_columns(["source_id"])  # a segment written before the column existed
    for n, table in enumerate((old, new)):
        with shards.ParquetFile(tmp_path, shards.segment_name("g", n, 0, 0), schema=table.schema) as file:
            file.write(table)
        manifest.append_manifest(tmp_path, {"kind": "flush", "added": [file.entry],
                                            "offsets": {f"g:{n}": [0, 0]}})
    summary = compact(tmp_path, CompactOptions(target_bytes=1 << 30, include_partial=True))
    assert summary.rows_out == 2
    with snapshot(tmp_path) as files:
        merged = pq.read_table(files)
    assert sorted(merged.column("source_id").to_pylist()) == ["row-7", "row-8"]


def _source_gen(row):
    return {"id": f"{row}:0", "prompt_id": row, "sample_index": 0, "prompt_ids": [1, 2], "output_ids": [3],
            "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 2, "completion_tokens": 1,
            "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e", "model_path": "m",
            "engine_version": "v", "worker_id": "w", "source": "s", "source_row": row, "turn_index": 0,
            "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h",
            "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2}


def test_rows_of_a_pre_v3_file_conform_as_original_history_rows():
    import pyarrow as pa

    new = shards.batch_to_table(GenerationBatch.from_records([gen(0)]), {})
    assert new.to_pylist()[0]["history_mode"] == "original"  # what a new original-history row holds
    old = new.drop_columns(["conversation_id", "history_mode", "lane"])
    [row] = shards.conform(old, shards.TRAINING_SCHEMA).to_pylist()
    assert (row["history_mode"], row["conversation_id"], row["lane"]) == ("original", None, None)
    empty = shards.conform(old.slice(0, 0), shards.TRAINING_SCHEMA)
    assert empty.num_rows == 0 and empty.schema.field("history_mode").type == pa.string()
