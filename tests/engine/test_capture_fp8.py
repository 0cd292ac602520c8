"""FP8 hidden states from the capture connector on a real vLLM CPU server, against its float32 store.

Two capture servers on the 4-layer tiny model (engine float32, every layer id 0..4), one after
the other, get the same greedy requests: one stores ``float8_e4m3fn``, one ``float32``. The fp8
files pass the worker's check, become a dataset through the sink, and ``load`` gives their
states in the original shape; their codes and scales are numpy's quantization of the float32
capture (the connector's torch path and eaglefeed's codec agree); the error per layer against
bf16 (the float32 capture rounded, as the bf16 store writes it) is printed and bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import eaglefeed
from bench.fp8_error import describe, store_errors
from eaglefeed.consumers.sink.loop import run_sink
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import FP8, SCALES, check_file, read_header, read_tensor
from eaglefeed.dataset.state_files import e4m3
from eaglefeed.schemas import GENERATION
from tests.engine.conftest import CaptureServer
from tests.engine.test_hidden_states_capture import generate, path_of, prompt, wait_for
from tests.factories import generation_record
from tests.fakes.kafka import FakeKafka

pytestmark = [pytest.mark.engine, pytest.mark.slow]

LAYERS = (0, 1, 2, 3, 4)
LENGTHS = (1, 17, 128, 129, 500, 1300)
NEW_TOKENS = 6
KAFKA = KafkaConfig(topic_prefix="fp8")


def capture_all(server: CaptureServer) -> list[tuple[list[int], list[int], Path]]:
    """Each prompt in turn (one at a time, so both servers compute alike): prompt, output, file."""
    out = []
    for i, n in enumerate(LENGTHS):
        ids = prompt(100 + i, n)
        response = generate(server, f"fp8-{i}", ids, NEW_TOKENS)
        out.append((ids, response["choices"][0]["token_ids"], path_of(response)))
    wait_for([path for *_, path in out])
    server.server.stop()
    return out


def sink_rows(root: Path, captured: list[tuple[list[int], list[int], Path]]) -> None:
    """The fp8 files as rows of a dataset at ``root`` (checked as the worker does, written by the sink)."""
    kafka = FakeKafka()
    kafka.create_topic(KAFKA.generations_topic, partitions=1)
    kafka.create_topic(KAFKA.dead_letter_topic)
    for i, (ids, output, path) in enumerate(captured):
        rec = generation_record(id=f"r{i}", prompt_id=f"p{i}", prompt_ids=ids, output_ids=output,
                                source_row=str(i))
        ref = check_file(path, token_ids=ids + output[:-1], layer_ids=LAYERS, dtype=FP8)
        rec["hidden_states"] = ref.to_record()
        kafka.append(KAFKA.generations_topic, GENERATION.encode(rec), key=rec["id"].encode(), partition=0)
    config = SinkConfig(kafka=KAFKA, output=root, exit_when_idle=0.1, flush_seconds=0.05)
    summary = run_sink(config, clients=kafka)
    assert summary.rows_written == len(captured)


def test_fp8_capture_loads_in_its_shape_and_is_within_e4m3s_error_of_bf16(
        capture_vllm: Callable[..., CaptureServer], tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    fp8 = capture_all(capture_vllm(layer_ids=LAYERS, dtype=FP8, store_dir=root / hidden_states.STORE))
    exact = capture_all(capture_vllm(layer_ids=LAYERS, dtype="float32"))
    codes_equal = scales_equal = total = 0
    for (ids, output, low), (ids32, output32, high) in zip(fp8, exact, strict=True):
        assert (ids, output) == (ids32, output32)  # greedy, and the store's dtype changes nothing computed
        header = read_header(low)
        assert header.metadata["dtype"] == FP8 and header.tensors["hidden_states"][0] == "F8_E4M3"
        codes, scales = read_tensor(low, header, "hidden_states"), read_tensor(low, header, SCALES)
        assert codes.shape == (len(ids) + len(output) - 1, len(LAYERS), 128)
        assert scales.shape == (*codes.shape[:2], 1) and scales.dtype == np.float32
        truth = np.asarray(read_tensor(high, read_header(high), "hidden_states"))
        want_codes, want_scales = e4m3.quantize(truth)
        codes_equal += int((codes == want_codes).sum())
        scales_equal += int((scales == want_scales).sum())
        total += codes.size
        assert low.stat().st_size / (high.stat().st_size - codes.size * 2) < 0.55  # vs the same file in bf16
    print(f"\nfp8 codes equal to numpy's quantization of the float32 capture: {codes_equal / total:.6f}; "
          f"scales {scales_equal / (total / 128):.6f}")
    assert codes_equal / total > 0.999 and scales_equal / (total / 128) > 0.999

    sink_rows(root, fp8)
    rows = eaglefeed.load(root, hidden_states=True)
    assert len(rows) == len(LENGTHS)
    for row, (ids, output, _path) in zip(rows, fp8, strict=True):
        states = row["hidden_states"]
        assert states.shape == states.float32().shape == (len(ids) + len(output) - 1, len(LAYERS), 128)
        assert states.float32(layer=4).shape == (states.shape[0], 128)

    result = store_errors([(low, high) for (*_a, low), (*_b, high) in zip(fp8, exact, strict=True)])
    print(describe(result))
    for layer in LAYERS:
        against_fp32 = result["fp8_vs_float32"][layer]
        assert against_fp32["elem_rel_max"] <= 2.0**-4 * (1 + 1e-5)  # half a step of 3 mantissa bits
        assert against_fp32["abs_of_amax"] <= 16 / 448 * (1 + 1e-5)  # half the top step (32) over 448
        assert result["fp8_vs_bf16"][layer]["row_rel_mean"] < 0.04
