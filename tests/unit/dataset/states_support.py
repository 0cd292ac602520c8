"""A dataset whose rows carry hidden states: store files from ``write_file``, rows through the sink.

``build_lanes`` adds ``tokens`` conversation lanes: each turn's prompt is the previous turn's ids and
a suffix, and its file holds only the positions the earlier turns' files do not (as the worker
stores them).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from eaglefeed.consumers.sink.loop import run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import check_file
from eaglefeed.dataset.state_files import write as store_write
from eaglefeed.schemas import GENERATION
from tests.factories import generation_record
from tests.fakes.kafka import FakeKafka

KAFKA = KafkaConfig(topic_prefix="states")
LAYERS = (1, 2, 3, 4)  # three auxiliary layers and N = 4
N = 4
HIDDEN = 8


def record(root: Path, i: int, *, dtype: str, layers: tuple[int, ...] = LAYERS, states: bool = True,
           output_len: int = 5) -> tuple[dict, np.ndarray | None]:
    """GenerationRecord ``r{i}`` (prompt of 3 ids) and, with ``states``, its file written and referenced."""
    rng = np.random.default_rng(i)
    prompt = [int(x) for x in rng.integers(1, 4000, 3)]
    output = [int(x) for x in rng.integers(1, 4000, output_len)]
    rec = generation_record(id=f"r{i}", prompt_id=f"p{i}", prompt_ids=prompt, output_ids=output,
                            source_row=str(i))
    if not states:
        return rec, None
    ids = prompt + output[:-1]
    values = (rng.standard_normal((len(ids), len(layers), HIDDEN)) * 3).astype(np.float32)
    path = root / hidden_states.STORE / f"r{i}-1-abcd.safetensors"
    store_write.write_file(path, states=values, token_ids=ids, layer_ids=layers, num_hidden_layers=N,
                             dtype=dtype)
    rec["hidden_states"] = check_file(path, token_ids=ids, layer_ids=layers, dtype=dtype).to_record()
    return rec, values


def build(root: Path, rows: int = 4, *, dtype: str = "bfloat16", layers: tuple[int, ...] = LAYERS,
          without: tuple[int, ...] = (), lengths: dict[int, int] | None = None) -> list[dict]:
    """Write ``rows`` rows into the dataset ``root`` through the sink; rows in ``without`` have no states."""
    made = [record(root, i, dtype=dtype, layers=layers, states=i not in without,
                   output_len=(lengths or {}).get(i, 5))[0] for i in range(rows)]
    sink(root, made)
    return made


def lane_records(root: Path, name: str, outputs: list[int], *, dtype: str,
                 seed: int) -> tuple[list[dict], list[int]]:
    """The turns of the ``tokens`` lane ``name`` (lane 0), output lengths ``outputs``, their files written.

    Turn k's prompt is turn k-1's prompt + output + 2 suffix ids (turn 0's: 3 ids); its file holds
    the positions from turn k-1's last id on. Returns the records and the final turn's ids.
    """
    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(1, 4000, 3)]
    whole = (rng.standard_normal((3 + sum(outputs) + 2 * len(outputs), len(LAYERS), HIDDEN)) * 3
             ).astype(np.float32)  # the lane's states; each turn's file holds its own positions
    made, start, ids = [], 0, prompt
    for turn, length in enumerate(outputs):
        output = [int(x) for x in rng.integers(1, 4000, length)]
        ids = prompt + output
        state = {"conversation_id": name, "lane": 0, "turn_index": turn, "mode": "tokens"}
        rec = {**generation_record(id=f"{name}-t{turn}:0", prompt_id=f"{name}-t{turn}", prompt_ids=prompt,
                                   output_ids=output, source_row=f"{name}-{turn}"),
               "turn_index": turn, "conversation": json.dumps(state)}
        held = ids[:-1][start:]
        path = root / hidden_states.STORE / f"{name}-t{turn}-1-abcd.safetensors"
        store_write.write_file(path, states=whole[start:len(ids) - 1], token_ids=held, layer_ids=LAYERS,
                               num_hidden_layers=N, dtype=dtype, start=start)
        rec["hidden_states"] = check_file(path, token_ids=held, layer_ids=LAYERS, dtype=dtype,
                                          start=start).to_record()
        made.append(rec)
        start = len(ids) - 1  # the next turn's file starts at this turn's last id
        prompt = ids + [int(x) for x in rng.integers(1, 4000, 2)]
    return made, ids


def build_lanes(root: Path, lanes: dict[str, list[int]], *, rows: int = 2,
                dtype: str = "bfloat16") -> list[dict]:
    """``rows`` plain rows (``build``'s) and the ``tokens`` lanes ``name → output lengths``, sunk."""
    made = [record(root, i, dtype=dtype)[0] for i in range(rows)]
    for seed, (name, outputs) in enumerate(lanes.items()):
        made += lane_records(root, name, outputs, dtype=dtype, seed=100 + seed)[0]
    sink(root, made)
    return made


def sink(root: Path, records: list[dict]) -> None:
    """The records into the dataset ``root`` through the sink (in-memory Kafka), every one written."""
    kafka = FakeKafka()
    kafka.create_topic(KAFKA.generations_topic, partitions=1)
    kafka.create_topic(KAFKA.dead_letter_topic)
    for rec in records:
        kafka.append(KAFKA.generations_topic, GENERATION.encode(rec), key=rec["id"].encode(), partition=0)
    summary = run_sink(SinkConfig(kafka=KAFKA, output=root, exit_when_idle=0.1, flush_seconds=0.05),
                       clients=kafka)
    assert summary.rows_written == len(records)


def model_dir(folder: Path, *, eps: float = 1e-5, hidden: int = HIDDEN) -> Path:
    """A target model folder holding what ``--final-norm`` reads: config.json and a bf16 norm weight."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "rms_norm_eps": eps,
                                                    "hidden_size": hidden, "num_hidden_layers": N}))
    weight = (np.random.default_rng(7).uniform(0.5, 1.5, hidden)).astype(np.float32)
    bits = weight.view(np.uint32)
    raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    header = {"model.norm.weight": {"dtype": "BF16", "shape": [hidden], "data_offsets": [0, len(raw)]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + raw)
    return folder
