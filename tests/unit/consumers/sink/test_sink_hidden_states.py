"""The sink commits a row only if its hidden states exist and match; ``load`` maps them back; gc."""

import json
import os
import time

import numpy as np
import pytest

import eaglefeed
from eaglefeed.consumers.sink.loop import run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.collect import collect
from eaglefeed.dataset.export import export
from eaglefeed.dataset.hidden_states import check_file
from eaglefeed.dataset.state_files import write as store_write
from eaglefeed.dataset.stats import compute_stats, render
from eaglefeed.schemas import DEAD_LETTER, GENERATION
from tests.fakes.kafka import FakeKafka
from tests.unit.consumers.sink.sink_support import gen, read_ids

KAFKA = KafkaConfig(topic_prefix="x")
TOPIC, DLQ = KAFKA.generations_topic, KAFKA.dead_letter_topic
LAYERS = (1, 2, 4)


@pytest.fixture
def kafka():
    fake = FakeKafka()
    fake.create_topic(TOPIC, partitions=1)
    fake.create_topic(DLQ)
    return fake


def captured(root, i, *, dtype="bfloat16", attempt=1):
    """Record ``p{i}:0`` with its states written into ``root``'s store and referenced, as a worker does."""
    record = gen(i)
    ids = record["prompt_ids"] + record["output_ids"][:-1]
    states = np.random.default_rng(i).standard_normal((len(ids), len(LAYERS), 16)).astype(np.float32)
    path = root / hidden_states.STORE / f"p{i}-0-{attempt}-abcd.safetensors"
    store_write.write_file(path, states=states, token_ids=ids, layer_ids=LAYERS, num_hidden_layers=4,
                             dtype=dtype)
    record["hidden_states"] = check_file(path, token_ids=ids, layer_ids=LAYERS, dtype=dtype).to_record()
    return record, states, path


def sink(kafka, root, records):
    for record in records:
        kafka.append(TOPIC, GENERATION.encode(record), key=record["id"].encode(), partition=0)
    cfg = SinkConfig(kafka=KAFKA, output=root, exit_when_idle=0.1, flush_seconds=0.05)
    return run_sink(cfg, clients=kafka)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_rows_keep_their_reference_and_load_maps_the_states_back(kafka, tmp_path, dtype):
    made = [captured(tmp_path, i, dtype=dtype) for i in range(3)]
    summary = sink(kafka, tmp_path, [record for record, _, _ in made])
    assert summary.rows_written == 3
    rows = eaglefeed.load(tmp_path, hidden_states=True)
    assert len(rows) == 3
    for row, (record, states, _) in zip(sorted(rows, key=lambda r: r["id"]), made, strict=True):
        assert row["id"] == record["id"]
        held = row["hidden_states"]
        assert held.shape == states.shape and held.layer_ids == LAYERS
        assert isinstance(held.raw, np.memmap)  # mapped, not read
        tolerance = 0 if dtype == "float32" else 2.0 ** -8  # bf16 keeps 8 bits of mantissa
        assert np.allclose(held.float32(), states, rtol=tolerance, atol=0)
        assert np.array_equal(held.float32(layer=2), held.float32()[:, 1])
    stats = compute_stats(tmp_path)
    positions = sum(states.shape[0] for _, states, _ in made)
    assert (stats.state_rows, stats.state_positions) == (3, positions)
    assert stats.state_bytes == sum(path.stat().st_size for _, _, path in made)
    per_token = 3 * 16 * (4 if dtype == "float32" else 2)  # layers x hidden x dtype, plus a header per file
    assert per_token < stats.as_dict()["hidden_states"]["bytes_per_token"] < per_token + 400 / positions * 3
    assert "hidden states: 3 rows" in render(stats)


def test_a_row_whose_file_was_altered_is_dead_lettered_and_the_rest_are_written(kafka, tmp_path):
    (good, _, _), (bad, _, path) = captured(tmp_path, 0), captured(tmp_path, 1)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # same size, other bytes
    path.write_bytes(bytes(data))
    summary = sink(kafka, tmp_path, [good, bad])
    assert summary.rows_written == 1 and read_ids(tmp_path) == ["p0:0"]
    letter, = (DEAD_LETTER.decode(r.value) for r in kafka.read(DLQ))
    assert letter["error_kind"] == "hidden_states_corrupt" and "sha256" in letter["message"]


def test_a_missing_file_stops_the_sink_naming_the_folder_and_writes_nothing(kafka, tmp_path):
    (record, _, path), = [captured(tmp_path, 0)]
    path.unlink()
    with pytest.raises(DatasetError, match=r"--hidden-states-dir\s+must be .*hidden_states"):
        sink(kafka, tmp_path, [record])
    assert read_ids(tmp_path) == [] and kafka.read(DLQ) == []


def test_a_redelivered_duplicate_whose_file_is_gone_is_dropped_as_a_duplicate(kafka, tmp_path):
    (first, _, _), = [captured(tmp_path, 0)]
    assert sink(kafka, tmp_path, [first]).rows_written == 1
    again, _, path = captured(tmp_path, 0, attempt=2)
    path.unlink()  # a retry's file, collected since: the dataset holds the row already
    summary = sink(kafka, tmp_path, [again])
    assert summary.rows_written == 0 and summary.duplicates_dropped == 1
    assert eaglefeed.load(tmp_path, hidden_states=True)[0]["hidden_states"].raw.size  # the first's file


def test_gc_deletes_old_unnamed_files_only_and_never_a_named_one(kafka, tmp_path):
    made = [captured(tmp_path, i) for i in range(2)]
    assert sink(kafka, tmp_path, [record for record, _, _ in made]).rows_written == 2
    _, _, retried = captured(tmp_path, 0, attempt=2)  # a failed attempt's file: nobody names it
    _, _, young = captured(tmp_path, 1, attempt=3)
    torn = tmp_path / hidden_states.STORE / "p9-0-1-abcd.safetensors.tmp"
    torn.write_bytes(b"cut short")
    old = time.time() - 2 * 3600
    for path in [retried, torn, *(p for _, _, p in made)]:
        os.utime(path, (old, old))
    summary = collect(tmp_path, grace_seconds=3600)
    assert (summary.referenced, summary.deleted, summary.young, summary.missing) == (2, 2, 1, 0)
    assert not retried.exists() and not torn.exists() and young.exists()
    assert all(path.exists() for _, _, path in made)
    assert all(row["hidden_states"].raw.size for row in eaglefeed.load(tmp_path, hidden_states=True))


def _lane_turns(root):
    """Three turns of one tokens lane, each file holding only what the earlier turns' files do not."""
    states = np.random.default_rng(3).standard_normal((64, len(LAYERS), 16)).astype(np.float32)
    prompt, records, start = [1, 2], [], 0
    for turn, (output, suffix) in enumerate([([7, 8, 2], [9]), ([10, 2], [11, 12]), ([13, 14, 2], [])]):
        ids = prompt + output
        state = {"conversation_id": "conv", "lane": 0, "turn_index": turn, "mode": "tokens"}
        record = {**gen(turn), "id": f"t{turn}:0", "prompt_id": f"t{turn}", "prompt_ids": prompt,
                  "output_ids": output, "completion_tokens": len(output), "prompt_tokens": len(prompt),
                  "turn_index": turn, "conversation": json.dumps(state)}
        path = root / hidden_states.STORE / f"t{turn}.safetensors"
        held = ids[:-1][start:]
        store_write.write_file(path, states=states[start:len(ids) - 1], token_ids=held, layer_ids=LAYERS,
                                 num_hidden_layers=4, start=start)
        record["hidden_states"] = check_file(path, token_ids=held, layer_ids=LAYERS, dtype="float32",
                                             start=start).to_record()
        records.append(record)
        start = len(ids) - 1  # the next turn's file starts at this turn's last id
        prompt = ids + suffix
    return records, states, ids


def test_a_tokens_lane_loads_as_one_row_of_its_final_ids_every_span_and_all_its_states(kafka, tmp_path):
    records, states, final = _lane_turns(tmp_path)
    assert sink(kafka, tmp_path, records).rows_written == 3
    stored = sum((tmp_path / r["hidden_states"]["uri"]).stat().st_size for r in records)
    header = 3 * 400  # each file's header, about
    assert stored <= (len(final) - 1) * len(LAYERS) * 16 * 4 + header  # every position stored once
    lane, = eaglefeed.load(tmp_path, hidden_states=True, lanes=True)
    assert lane["turns"] == 3 and lane["input_ids"] == final
    spans = [(2, 5), (6, 8), (10, 13)]  # each turn's output: prompt_len to seq_len on the final ids
    assert lane["loss_mask"] == [int(any(a <= i < b for a, b in spans)) for i in range(len(final))]
    assert lane["hidden_states"].shape == (len(final) - 1, len(LAYERS), 16)
    assert np.array_equal(lane["hidden_states"].float32(), states[:len(final) - 1])
    plain = eaglefeed.load(tmp_path, hidden_states=True)
    assert len(plain) == 3 and sorted(r["hidden_states"].ref.start for r in plain) == [0, 4, 7]


def test_the_exports_refuse_a_lane_s_partial_turn_files_rather_than_write_them_as_rows(kafka, tmp_path):
    records, _, _ = _lane_turns(tmp_path / "d")
    assert sink(kafka, tmp_path / "d", records).rows_written == 3
    out = tmp_path / "train" / "data.jsonl"
    out.parent.mkdir()
    with pytest.raises(DatasetError, match="2 rows are later turns of tokens conversation lanes"):
        export(tmp_path / "d", fmt="speculators", out=out, hidden_states={})
    assert list(out.parent.iterdir()) == []
