"""``generate --hidden-states``: a row references a checked file, else the attempt fails; misfits stop it."""

from __future__ import annotations

import asyncio
import hashlib
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
from eaglefeed.dataset.store import ObjectStore, parse
from eaglefeed.schemas import DEAD_LETTER, GENERATION, PROMPT
from tests.factories import prompt_record
from tests.fakes.kafka import FakeKafka
from tests.fakes.s3 import FakeS3
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
        upload: put each file into this store (``kv_connector_extra_config.store``) at
            ``hidden_states/<name>`` under ``upload_uri`` instead of leaving it in ``folder``.
    """

    def __init__(self, folder: Path, *, layers: tuple[int, ...] = (1, 2, 4), depth: int = 4,
                 dtype: str = "bfloat16", corrupt: dict[int, int] | None = None, answer_path: bool = True,
                 delay: float = 0.01, upload: FakeS3 | None = None, upload_uri: str = "") -> None:
        self.folder, self.layers, self.depth, self.dtype = folder, layers, depth, dtype
        self.upload, self.upload_uri = upload, upload_uri
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
            later = threading.Timer(self.delay, self._write, args=(name,), kwargs=write)
            later.start()
        payload = {"request_id": body["request_id"], "model": "tiny", "prompt_token_ids": None,
                   "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out)},
                   "choices": [{"index": 0, "finish_reason": "length", "stop_reason": None,
                                "token_ids": out}]}
        if self.answer_path:
            payload["kv_transfer_params"] = {"hidden_states_path": f"/server/mount/{name}"}
        await asyncio.sleep(0)
        return httpx.Response(200, json=payload)


    def _write(self, name: str, **write: Any) -> None:
        path = self.folder / name
        store_write.write_file(path, **write)
        if self.upload is not None:  # as the connector's StoreWriter: the bytes, their sha256; no file kept
            data = path.read_bytes()
            path.unlink()
            uri = parse(self.upload_uri)
            self.upload.put(uri.bucket, uri.key(f"hidden_states/{name}"), data,
                            {"sha256": hashlib.sha256(data).hexdigest()})


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
    # the file that did not match is gone: no row names it, and it would count against a budget
    assert sorted(p.name for p in store.glob("*.safetensors")) == sorted(
        Path(HiddenStatesRef.from_record(row["hidden_states"]).uri).name for row in rows)


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


def _lane_turn(mode: str = "tokens") -> tuple[FakeKafka, list[int]]:
    """A fake Kafka holding turn 1 of a lane whose turn 0 was 12 ids (prompt + output); its input ids."""
    fake = FakeKafka()
    for topic, parts in ((PROMPTS, 1), (GENERATIONS, 1), (DEAD_LETTERS, 1)):
        fake.create_topic(topic, parts)
    ids = list(range(10, 30))
    state = {"conversation_id": "c", "lane": 0, "turn_index": 1, "mode": mode, "max_turns": 4,
             "source_messages": [], "tools": None, "template_kwargs": {}, "position": 3, "history": [],
             "history_len": 12}
    record = {**prompt_record(prompt_id="p-turn1", input_ids=ids), "turn_index": 1,
              "conversation": json.dumps(state)}
    fake.append(PROMPTS, PROMPT.encode(record), key=b"k", partition=0)
    return fake, ids


@pytest.mark.parametrize("mode", ["tokens", "rerender"])
def test_a_tokens_lane_turn_keeps_only_the_positions_its_earlier_turns_do_not_hold(tmp_path, mode):
    """Turn k+1 of a tokens lane starts with turn k's prompt + output (history_len ids), whose
    file holds turn k's prompt + output[:-1]: this row keeps the rest, from position history_len - 1."""
    store = tmp_path / hidden_states.STORE
    fake, ids = _lane_turn(mode)
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
    fake, ids = _lane_turn()
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


URI = "s3://bucket/datasets/run"


@pytest.fixture
def fake_s3(monkeypatch: pytest.MonkeyPatch) -> FakeS3:
    """Every ObjectStore of the test talks to one in-memory store."""
    s3 = FakeS3()
    monkeypatch.setattr("eaglefeed.dataset.store.client.make_client", lambda: s3)
    return s3


def test_a_server_that_puts_its_files_into_the_store_is_found_and_each_object_checked_by_ranges(
        tmp_path, fake_s3, caplog):
    spool, mount = tmp_path / "spool", tmp_path / "server"  # the worker's spool; the server's own folder
    mount.mkdir()
    fake = kafka_with_prompts(3, partitions=1)
    server = CaptureVllm(mount, upload=fake_s3, upload_uri=URI)
    with caplog.at_level("INFO"):
        assert _run(fake, server, spool, layers=(1, 2, 4), upload=URI).join() == 3
    calls = list(fake_s3.calls)  # the worker's (the checks below download)
    assert "puts each file into s3://bucket/datasets/run/hidden_states itself" in caplog.text
    rows = [GENERATION.decode(r.value) for r in fake.read(GENERATIONS)]
    assert len(rows) == 3 and fake.read(DEAD_LETTERS) == []
    store = ObjectStore(parse(URI))
    refs = [HiddenStatesRef.from_record(row["hidden_states"]) for row in rows]
    assert sorted(fake_s3.keys("bucket")) == sorted(f"datasets/run/{ref.uri}" for ref in refs)  # probe's gone
    for ref, row in zip(refs, rows, strict=True):
        stored = store.head(ref.uri)
        assert stored is not None and (stored.size, stored.sha256) == (ref.bytes, ref.sha256)
        assert ref.shape == (len(row["prompt_ids"]) + len(row["output_ids"]) - 1, 3, HIDDEN)
        local = tmp_path / "check" / Path(ref.uri).name
        assert store.download(ref.uri, local)
        assert hidden_states.check_file(local, token_ids=row["prompt_ids"] + row["output_ids"][:-1],
                                        layer_ids=(1, 2, 4), dtype=None) == ref
    assert not list(spool.iterdir()) and not list(mount.iterdir())
    # the rows' objects were read by ranges, never whole, and the worker put nothing of its own
    gets = [c for c in calls if c.startswith("get datasets/run/hidden_states/p")]
    assert len(gets) == 3 and all(c.endswith("bytes=0-65535") for c in gets)  # one ranged read each
    assert not [c for c in calls if c.startswith("put datasets/run/hidden_states/p")]


@pytest.mark.parametrize(("prompts", "bad_times", "rows"), [(2, 1, 2), (1, 99, 0)], ids=["retried", "dead"])
def test_an_object_that_does_not_match_is_retried_and_one_that_never_does_is_dead_lettered(
        tmp_path, fake_s3, prompts, bad_times, rows):
    fake = kafka_with_prompts(prompts, partitions=1)
    server = CaptureVllm(tmp_path / "server", corrupt={_first_ids(fake)[0]: bad_times}, upload=fake_s3,
                         upload_uri=URI)
    run = _run(fake, server, tmp_path / "spool", layers=(1, 2, 4), upload=URI)
    assert run.join() == prompts
    assert len(fake.read(GENERATIONS)) == rows
    assert run.metric("eaglefeed_worker_retries_total", reason="hidden_states") >= 1
    assert len(fake_s3.keys("bucket")) == rows  # the objects that did not match were deleted
    if not rows:
        letter, = (DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS))
        assert letter["error_kind"] == "hidden_states" and "token_ids differ" in letter["message"]
    else:
        assert fake.read(DEAD_LETTERS) == []


def test_a_tokens_lane_turn_in_the_store_keeps_only_its_new_positions_and_drops_the_whole_object(
        tmp_path, fake_s3):
    fake, ids = _lane_turn()
    server = CaptureVllm(tmp_path / "server", upload=fake_s3, upload_uri=URI)
    assert _run(fake, server, tmp_path / "spool", layers=(1, 2, 4), upload=URI).join() == 1
    row, = (GENERATION.decode(r.value) for r in fake.read(GENERATIONS))
    ref = HiddenStatesRef.from_record(row["hidden_states"])
    whole = len(ids) + len(row["output_ids"]) - 1
    assert ref.start == 11 and ref.shape[0] == whole - 11
    assert fake_s3.keys("bucket") == [f"datasets/run/{ref.uri}"]  # the whole object replaced by the kept part
    stored = ObjectStore(parse(URI)).head(ref.uri)
    assert stored is not None and stored.sha256 == ref.sha256 and stored.size == ref.bytes
    assert not list((tmp_path / "spool").iterdir())


def test_a_worker_with_a_spool_deletes_its_stale_state_files_and_nothing_else(tmp_path, fake_s3):
    import os
    import time

    spool = tmp_path / "spool"
    spool.mkdir()
    old = time.time() - 5000
    stale = [spool / "late.safetensors", spool / "killed.safetensors.tmp"]
    kept = [spool / "young.safetensors", spool / "notes.txt"]
    for path in stale + kept:
        path.write_bytes(b"x")
    for path in (*stale, spool / "notes.txt"):
        os.utime(path, (old, old))
    fake = kafka_with_prompts(1, partitions=1)
    server = CaptureVllm(spool, upload=fake_s3, upload_uri=URI)  # vLLM's folder is the spool
    assert _run(fake, server, spool, layers=(1, 2, 4), upload=URI).join() == 1
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
