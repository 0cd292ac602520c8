import pyarrow.parquet as pq

from consumers import shards


def gen(i, prompt=(1, 2, 3), output=(3, 4, 2)):
    return {
        "id": f"p{i}:0", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": list(prompt),
        "output_ids": list(output), "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": len(prompt),
        "completion_tokens": len(output), "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
        "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i),
        "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


def test_rows_are_prompt_plus_output_with_a_zero_then_one_mask():
    table = shards.rows_to_table([gen(0), gen(1, prompt=(9,), output=(3, 5, 6, 2))],
                                 [shards.Markers(think=3, tool_call=5)] * 2)
    rows = table.to_pylist()
    assert rows[0]["input_ids"] == [1, 2, 3, 3, 4, 2]
    assert rows[0]["loss_mask"] == [0, 0, 0, 1, 1, 1]
    assert rows[1]["input_ids"] == [9, 3, 5, 6, 2] and rows[1]["loss_mask"] == [0, 1, 1, 1, 1]
    assert rows[0]["prompt_len"] == 3 and rows[1]["seq_len"] == 5
    assert rows[0]["has_reasoning"] and not rows[0]["has_tool_call"] and rows[1]["has_tool_call"]
    assert rows[0]["matched_stop"] == "2"
    assert table.schema.field("input_ids").type.value_type.bit_width == 32


def test_segment_manifest_and_resume(tmp_path):
    table = shards.rows_to_table([gen(0), gen(1)], [shards.Markers()] * 2)
    name = shards.segment_name("gen", 0, 10, 11)
    entry = shards.write_segment(tmp_path, name, table)
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
    removed = shards.discard_uncommitted(tmp_path, live, shards.segment_prefix("gen", 0))
    assert len(removed) == 2
    assert (tmp_path / "segments" / shards.segment_name("gen", 1, 0, 5)).exists()
    assert set(shards.read_ids(tmp_path, live)) == {"p0:0", "p1:0"}
    assert pq.read_table(tmp_path / "segments" / name).num_rows == 2
