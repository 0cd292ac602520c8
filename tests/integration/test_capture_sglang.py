"""``generate --hidden-states`` against SGLang's aux-hidden-states contract (the stand-in), end to end.

SGLang returns the aux layers in the ``/generate`` response (``return_hidden_states``), so the
worker writes each row's file itself. The stand-in's values are labelled (a formula of the token,
its position, the layer and the dimension: docs/STANDIN.md), so every stored value can be checked
exactly, in bf16 too; the dataset checks are the vLLM path's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import eaglefeed
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import check_file
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.devtools.standin.hidden_states import value
from tests.cli import kafka_flags, run_cli

pytestmark = pytest.mark.kafka

CAPTURE = ("--latency-model", "none", "--enable-return-aux-hidden-states",
           "--speculative-algorithm", "EAGLE3")
NO_CACHE = ("--prefix-cache-block-size", "0")  # SGLang's --disable-radix-cache
LAYERS = (2, 4, 5)  # SGLang's default [2, N//2, N-3] for the stand-in's 8 layers
HIDDEN = 16


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}


def _produce(kafka, tmp_path: Path, rows: int) -> None:
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("\n".join(SAMPLE_PROMPTS.read_text().splitlines()[:rows]) + "\n")
    done = run_cli("produce", "--tokenizer", str(TOKENIZER_DIR), *kafka_flags(kafka), "--workers", "0",
                   "--max-new-tokens", "48", "--state-dir", str(tmp_path / "state"), str(inputs), env=_env())
    assert done.returncode == 0, done.stderr[-3000:]


def _generate(kafka, url: str, store: Path, *flags: str):
    return run_cli("generate", "--sglang-url", url, *kafka_flags(kafka),
                   "--hidden-states", ",".join(map(str, LAYERS)), "--hidden-states-dir", str(store),
                   "--exit-when-idle", "3", "--progress-seconds", "0",
                   *flags, timeout=240, env=_env())


def test_sglang_aux_states_become_row_files_that_hold_exactly_what_the_server_returned(
        kafka_config, standin_factory, tmp_path):
    url = standin_factory(*CAPTURE, *NO_CACHE)
    _produce(kafka_config, tmp_path, 24)
    out = tmp_path / "dataset"
    worker = _generate(kafka_config, url, out / hidden_states.STORE)
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert "hidden states from" in worker.stderr and "layers [2, 4, 5] of 8" in worker.stderr
    sink = run_cli("sink", "--output", str(out), *kafka_flags(kafka_config), "--flush-seconds", "0.3",
                   "--exit-when-idle", "3", "--progress-seconds", "0", timeout=240, env=_env())
    assert sink.returncode == 0 and "wrote 24 rows" in sink.stdout, sink.stdout + sink.stderr[-3000:]

    rows = eaglefeed.load(out, hidden_states=True)
    assert len(rows) == 24
    for row in rows:
        states = row["hidden_states"]
        assert states is not None and states.layer_ids == LAYERS and states.ref.dtype == "bfloat16"
        assert hidden_states.problem(out, states.ref) is None
        ids = row["input_ids"][:-1]  # prompt + output[:-1]
        check_file(out / states.ref.uri, token_ids=ids, layer_ids=LAYERS, dtype="bfloat16")
        t = np.asarray(ids, np.int64)[:, None, None]
        p = np.arange(len(ids))[:, None, None]
        k = np.asarray(LAYERS)[None, :, None]
        d = np.arange(HIDDEN)[None, None, :]
        expected = ((7 * t + 13 * p + 101 * k + 3 * d) % 255 - 127) / 64
        assert expected[1, 2, 3] == value(ids[1], 1, LAYERS[2], 3)
        assert np.array_equal(states.float32(), expected.astype(np.float32))  # exact: multiples of 1/64


@pytest.mark.parametrize(("flags", "says"), [
    (CAPTURE, "--disable-radix-cache"),  # its prefix cache on: cached positions would get no states
    (("--latency-model", "none", *NO_CACHE), "without aux hidden states"),
], ids=["prefix-cache-on", "no-aux-flag"])
def test_an_sglang_server_that_cannot_return_whole_states_stops_the_worker_in_one_line(
        kafka_config, standin_factory, tmp_path, flags, says):
    url = standin_factory(*flags)
    _produce(kafka_config, tmp_path, 3)
    worker = _generate(kafka_config, url, tmp_path / "dataset" / hidden_states.STORE)
    assert worker.returncode != 0
    errors = [line for line in worker.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and says in errors[0], worker.stderr[-3000:]
