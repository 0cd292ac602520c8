"""``generate --hidden-states``: a row references a checked file, else the attempt fails; misfits stop it."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from eaglefeed.core.capture import CaptureSettings, default_layers
from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset import hidden_states
from eaglefeed.dataset.hidden_states import HiddenStatesRef
from eaglefeed.dataset.state_files import e4m3
from eaglefeed.dataset.state_files import write as store_write
from eaglefeed.schemas import DEAD_LETTER, GENERATION, PROMPT
from tests.factories import prompt_record
from tests.fakes.kafka import FakeKafka
from tests.fakes.vllm import vllm_info
from tests.unit.consumers.generate.loop_support import (
    DEAD_LETTERS,
    GENERATIONS,
    PROMPTS,
    WorkerRun,
    kafka_with_prompts,
)

HIDDEN = 8


class CaptureVllm:
    """A scripted vLLM with eaglefeed's capture connector: answers, then writes the file a little later.

    Args:
        folder: its ``shared_storage_path``.
        layers: the layers it captures; ``depth`` the model's N.
        corrupt: prompt ids whose file holds other token ids (``per`` times, then right).
        answer_path: False: the response names no file (a server without capture).
    """

    def __init__(self, folder: Path, *, layers: tuple[int, ...] = (1, 2, 4), depth: int = 4,
                 dtype: str = "bfloat16", corrupt: dict[int, int] | None = None, answer_path: bool = True,
                 delay: float = 0.01) -> None:
        self.folder, self.layers, self.depth, self.dtype = folder, layers, depth, dtype
        self.corrupt = dict(corrupt or {})
        self.answer_path, self.delay = answer_path, delay
        self.bodies: list[dict[str, Any]] = []
        self.transport = httpx.MockTransport(self._handle)
        self.count = 0

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        info = vllm_info(path)
        if info is not None:
            return info
        if path != "/inference/v1/generate":
            return httpx.Response(404)
        body = json.loads(request.content)
        self.bodies.append(body)
        ids = body["token_ids"]
        out = [7, 8, 9][:body["sampling_params"]["max_tokens"]]
        self.count += 1
        name = f"{body['request_id']}-{self.count:08x}.safetensors"
        saved = ids + out[:-1]
        if ids and ids[0] in self.corrupt and self.corrupt[ids[0]] > 0:
            self.corrupt[ids[0]] -= 1
            saved = saved[:-1] + [saved[-1] + 1]
        if body.get("kv_transfer_params", {}).get("include_output_tokens"):
            states = np.arange(len(saved) * len(self.layers) * HIDDEN, dtype=np.float32).reshape(
                len(saved), len(self.layers), HIDDEN) / 7
            write = {"states": states, "token_ids": saved, "layer_ids": self.layers,
                     "num_hidden_layers": self.depth, "dtype": self.dtype}
            later = threading.Timer(self.delay, store_write.write_file, args=(self.folder / name,),
                                    kwargs=write)
            later.start()
        payload = {"request_id": body["request_id"], "model": "tiny", "prompt_token_ids": None,
                   "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out)},
                   "choices": [{"index": 0, "finish_reason": "length", "stop_reason": None,
                                "token_ids": out}]}
        if self.answer_path:
            payload["kv_transfer_params"] = {"hidden_states_path": f"/server/mount/{name}"}
        await asyncio.sleep(0)
        return httpx.Response(200, json=payload)


def _run(fake: Any, server: CaptureVllm, store: Path, **capture: Any) -> WorkerRun:
    settings = CaptureSettings(store=store, wait_seconds=capture.pop("wait_seconds", 5.0), **capture)
    return WorkerRun(fake, server, exit_when_idle=0.3, capture=settings, engine="vllm")


def test_every_row_references_a_checked_file_of_its_prompt_and_output(tmp_path):
    store = tmp_path / "ds" / hidden_states.STORE
    fake = kafka_with_prompts(3, partitions=1)
    server = CaptureVllm(store)
    run = _run(fake, server, store, layers=(4, 1, 2))  # any order: the file holds them ascending
    assert run.join() == 3
    rows = [GENERATION.decode(r.value) for r in fake.read(GENERATIONS)]
    assert len(rows) == 3 and fake.read(DEAD_LETTERS) == []
    for row in rows:
        ref = HiddenStatesRef.from_record(row["hidden_states"])
        assert ref.uri.startswith("hidden_states/") and ref.layer_ids == (1, 2, 4)
        assert ref.shape == (len(row["prompt_ids"]) + len(row["output_ids"]) - 1, 3, HIDDEN)
        assert ref.dtype == "bfloat16" and ref.last_layer == "before_final_norm"
        assert hidden_states.problem(tmp_path / "ds", ref) is None
    assert run.metric("eaglefeed_worker_hidden_state_bytes_total") == sum(
        r["hidden_states"]["bytes"] for r in rows)
    asked = [b for b in server.bodies if b["token_ids"] != [0, 1, 2, 3]]
    assert all(b["kv_transfer_params"] == {"include_output_tokens": True} for b in asked)
    assert not list(store.glob("eaglefeed-capture-probe-*")), "the start-up probe's file is removed"


def test_a_file_that_does_not_match_is_retried_and_the_row_references_the_good_one(tmp_path):
    store = tmp_path / hidden_states.STORE
    fake = kafka_with_prompts(2, partitions=1)
    first_ids = _first_ids(fake)
    server = CaptureVllm(store, corrupt={first_ids[0]: 1})
    run = _run(fake, server, store, layers=(1, 2, 4))
    assert run.join() == 2
    rows = [GENERATION.decode(r.value) for r in fake.read(GENERATIONS)]
    assert len(rows) == 2 and fake.read(DEAD_LETTERS) == []
    assert run.metric("eaglefeed_worker_retries_total", reason="hidden_states") == 1
    for row in rows:
        assert hidden_states.problem(tmp_path, HiddenStatesRef.from_record(row["hidden_states"])) is None


def test_a_file_that_never_matches_is_dead_lettered_with_its_reason(tmp_path):
    store = tmp_path / hidden_states.STORE
    fake = kafka_with_prompts(1, partitions=1)
    server = CaptureVllm(store, corrupt={_first_ids(fake)[0]: 99})
    run = _run(fake, server, store, layers=(1, 2, 4))
    assert run.join() == 1
    assert fake.read(GENERATIONS) == []
    letter, = (DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS))
    assert letter["error_kind"] == "hidden_states" and "token_ids differ" in letter["message"]


@pytest.mark.parametrize(("server_kw", "capture", "says"), [
    ({"answer_path": False}, {}, "returned no hidden_states_path"),
    ({"layers": (1, 2, 3)}, {"layers": (1, 2, 4)},
     "captures layers [1, 2, 3] of 4; the run asks for [1, 2, 4]"),
    ({"layers": (1, 2, 4)}, {}, "the run asks for [1, 2]"),  # auto on 4 layers: [2, 4//2, 4-3]
    ({"dtype": "float32"}, {"layers": (1, 2, 4), "dtype": "bfloat16"}, "stores float32"),
], ids=["no-capture", "other-layers", "not-the-default", "other-dtype"])
def test_a_server_that_does_not_capture_what_the_run_asks_stops_the_worker_at_start(
        tmp_path, server_kw, capture, says):
    store = tmp_path / hidden_states.STORE
    fake = kafka_with_prompts(2, partitions=1)
    run = _run(fake, CaptureVllm(store, **server_kw), store, **capture)
    with pytest.raises(ConfigError, match=re.escape(says)):
        run.join()
    assert fake.read(GENERATIONS) == [] and fake.read(DEAD_LETTERS) == []


def test_a_server_writing_elsewhere_stops_the_worker_naming_both_folders(tmp_path):
    fake = kafka_with_prompts(1, partitions=1)
    server = CaptureVllm(tmp_path / "elsewhere")
    run = _run(fake, server, tmp_path / "store", layers=(1, 2, 4), wait_seconds=0.3)
    with pytest.raises(ConfigError, match="nothing reached --hidden-states-dir"):
        run.join()
    assert fake.read(DEAD_LETTERS) == []


def test_default_layers_follow_speculators():
    assert default_layers(32) == (2, 16, 29)
    assert default_layers(32, with_last=True) == (2, 16, 29, 32)
    assert default_layers(4) == (1, 2) and default_layers(4, with_last=True) == (1, 2, 4)


def _first_ids(fake: Any) -> list[int]:
    """The first input id of each prompt on the fake's prompts topic."""
    return [PROMPT.decode(r.value)["input_ids"][0] for r in fake.read(PROMPTS)]


@pytest.mark.parametrize("mode", ["tokens", "rerender"])
def test_a_tokens_lane_turn_keeps_only_the_positions_its_earlier_turns_do_not_hold(tmp_path, mode):
    """Turn k+1 of a tokens lane starts with turn k's prompt + output (history_len ids), whose
    file holds turn k's prompt + output[:-1]: this row keeps the rest, from position history_len - 1."""
    store = tmp_path / hidden_states.STORE
    fake = FakeKafka()
    for topic, parts in ((PROMPTS, 1), (GENERATIONS, 1), (DEAD_LETTERS, 1)):
        fake.create_topic(topic, parts)
    ids = list(range(10, 30))  # turn 0 was 12 ids (prompt + output); then a suffix
    state = {"conversation_id": "c", "lane": 0, "turn_index": 1, "mode": mode, "max_turns": 4,
             "source_messages": [], "tools": None, "template_kwargs": {}, "position": 3, "history": [],
             "history_len": 12}
    record = {**prompt_record(prompt_id="p-turn1", input_ids=ids), "turn_index": 1,
              "conversation": json.dumps(state)}
    fake.append(PROMPTS, PROMPT.encode(record), key=b"k", partition=0)
    server = CaptureVllm(store)
    assert _run(fake, server, store, layers=(1, 2, 4)).join() == 1
    row, = (GENERATION.decode(r.value) for r in fake.read(GENERATIONS))
    ref = HiddenStatesRef.from_record(row["hidden_states"])
    whole = len(ids) + len(row["output_ids"]) - 1
    start = 11 if mode == "tokens" else 0  # rerender re-renders the history: its turns keep full spans
    assert ref.start == start and ref.shape[0] == whole - start
    held = hidden_states.open_states(tmp_path, ref)
    full = np.arange(whole * 3 * HIDDEN, dtype=np.float32).reshape(whole, 3, HIDDEN) / 7  # as served
    assert np.array_equal(hidden_states.to_float32(held, "bfloat16"),
                          hidden_states.to_float32(_bf16(full[start:]), "bfloat16"))
    assert len(list(store.glob("*.safetensors"))) == 1, "the whole file is replaced by the kept part"


def test_an_fp8_run_references_fp8_files_and_a_lane_turn_keeps_their_codes_and_scales(tmp_path):
    """float8_e4m3fn: checked with its scales; a tokens lane's cut copies codes and scales exactly."""
    store = tmp_path / hidden_states.STORE
    fake = FakeKafka()
    for topic, parts in ((PROMPTS, 1), (GENERATIONS, 1), (DEAD_LETTERS, 1)):
        fake.create_topic(topic, parts)
    ids = list(range(10, 30))
    state = {"conversation_id": "c", "lane": 0, "turn_index": 1, "mode": "tokens", "max_turns": 4,
             "source_messages": [], "tools": None, "template_kwargs": {}, "position": 3, "history": [],
             "history_len": 12}
    record = {**prompt_record(prompt_id="p-turn1", input_ids=ids), "turn_index": 1,
              "conversation": json.dumps(state)}
    fake.append(PROMPTS, PROMPT.encode(record), key=b"k", partition=0)
    server = CaptureVllm(store, dtype=hidden_states.FP8)
    assert _run(fake, server, store, layers=(1, 2, 4), dtype=hidden_states.FP8).join() == 1
    row, = (GENERATION.decode(r.value) for r in fake.read(GENERATIONS))
    ref = HiddenStatesRef.from_record(row["hidden_states"])
    whole = len(ids) + len(row["output_ids"]) - 1
    assert ref.dtype == hidden_states.FP8 and ref.start == 11 and ref.shape == (whole - 11, 3, HIDDEN)
    assert hidden_states.problem(tmp_path, ref) is None
    full = np.arange(whole * 3 * HIDDEN, dtype=np.float32).reshape(whole, 3, HIDDEN) / 7  # as served
    codes, scales = e4m3.quantize(full)
    assert np.array_equal(hidden_states.open_states(tmp_path, ref), codes[11:])
    assert np.array_equal(hidden_states.open_scales(tmp_path, ref), scales[11:])


def _bf16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bf16 (as its uint16 bits), as the store holds them."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
