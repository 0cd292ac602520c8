"""``eaglefeed capture DIR``: rows without states get them, each once, resumably; nothing else changes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.compute as pc
import pytest

import eaglefeed
from eaglefeed.cli.main import build_parser
from eaglefeed.consumers.sink.loop import run_sink
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.dataset import hidden_states, manifest, state_fill
from eaglefeed.dataset.collect import collect
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.dataset.hidden_states import HiddenStatesRef, check_file
from eaglefeed.dataset.state_files import write as store_write
from eaglefeed.ops.capture_states import CaptureOptions, progress_line, run_capture
from eaglefeed.schemas import GENERATION
from tests.factories import generation_record
from tests.fakes.kafka import FakeKafka
from tests.fakes.vllm import vllm_info

KAFKA = KafkaConfig(topic_prefix="x")
TOPIC, DLQ = KAFKA.generations_topic, KAFKA.dead_letter_topic
LAYERS = (1, 2, 4)
HIDDEN = 8
URL = "http://vllm:8000"


def record(i: int) -> dict[str, Any]:
    """Row ``p{i}:0``: a prompt of its own (3 + i % 4 ids) and 3 output ids."""
    prompt = [100 + i, *range(10, 12 + i % 4)]
    return generation_record(id=f"p{i}:0", prompt_id=f"p{i}", prompt_ids=prompt, output_ids=[7, 8, 2],
                             source_row=str(i))


def states_of(token_ids: list[int], layers: tuple[int, ...] = LAYERS) -> np.ndarray:
    """The states the fake server computes: a function of the ids, so a check can recompute them."""
    ids = np.asarray(token_ids, np.float32)[:, None, None]
    return ids / 64 + np.asarray(layers, np.float32)[None, :, None] + np.arange(HIDDEN)[None, None, :] / 16


class CaptureVllm:
    """A scripted capture-enabled vLLM: names its file ``generate-tokens-<request id>-<n>``, writes it later.

    Args:
        folder: where it writes (its ``shared_storage_path``).
        answer_path: False: no ``hidden_states_path`` (started without capture).
        corrupt: how many of the first row requests write a file with other token ids.
        on_request: called with the number of row requests so far, before answering.
        status: answer row requests with this HTTP status instead.
    """

    def __init__(self, folder: Path, *, layers: tuple[int, ...] = LAYERS, dtype: str = "float32",
                 answer_path: bool = True, corrupt: int = 0, on_request: Any = None, status: int = 200,
                 delay: float = 0.005) -> None:
        self.folder, self.layers, self.dtype = folder, layers, dtype
        self.answer_path, self.corrupt = answer_path, corrupt
        self.on_request, self.status = on_request, status
        self.delay = delay
        self.bodies: list[dict[str, Any]] = []  # row requests (the start-up probe left out)
        self.transport = httpx.MockTransport(self._handle)
        self.count = 0
        self.timers: list[threading.Timer] = []

    @property
    def sent(self) -> Counter[tuple[int, ...]]:
        return Counter(tuple(b["token_ids"]) for b in self.bodies)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        info = vllm_info(path)
        if info is not None:
            return info
        if path != "/inference/v1/generate":
            return httpx.Response(404)
        body = json.loads(request.content)
        probe = body["request_id"].startswith("eaglefeed-capture-probe-")
        if not probe:
            self.bodies.append(body)
            if self.on_request is not None:
                self.on_request(len(self.bodies))
            if self.status != 200:
                return httpx.Response(self.status, json={"error": {"message": "scripted failure"}})
        ids = list(body["token_ids"])
        out = [7]
        self.count += 1
        name = f"generate-tokens-{body['request_id']}-{self.count:08x}.safetensors"
        include_output = body.get("kv_transfer_params", {}).get("include_output_tokens")
        saved = ids + out[:-1] if include_output else ids  # both: the prompt positions at max_tokens 1
        stored = list(saved)
        if not probe and self.corrupt > 0:
            self.corrupt -= 1
            stored[-1] += 1
        kwargs = {"states": states_of(saved, self.layers), "token_ids": stored, "layer_ids": self.layers,
                  "num_hidden_layers": 4, "dtype": self.dtype}
        if self.answer_path:
            timer = threading.Timer(self.delay, store_write.write_file, args=(self.folder / name,),
                                    kwargs=kwargs)
            timer.start()
            self.timers.append(timer)
        payload: dict[str, Any] = {"request_id": body["request_id"], "prompt_token_ids": None,
                                   "usage": {"prompt_tokens": len(ids), "completion_tokens": 1},
                                   "choices": [{"index": 0, "finish_reason": "length", "stop_reason": None,
                                                "token_ids": out}]}
        if self.answer_path:
            payload["kv_transfer_params"] = {"hidden_states_path": f"/mnt/server/{name}"}
        await asyncio.sleep(0)
        return httpx.Response(200, json=payload)

    def settle(self) -> None:
        for timer in self.timers:
            timer.join()


def sink_batches(root: Path, batches: list[list[dict[str, Any]]]) -> None:
    """Write the batches into ``root`` through the sink, one run each (one segment or more per run)."""
    kafka = FakeKafka()
    kafka.create_topic(TOPIC, partitions=1)
    kafka.create_topic(DLQ)
    for batch in batches:
        for rec in batch:
            kafka.append(TOPIC, GENERATION.encode(rec), key=rec["id"].encode(), partition=0)
        run_sink(SinkConfig(kafka=KAFKA, output=root, exit_when_idle=0.1, flush_seconds=0.05), clients=kafka)


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "ds"
    sink_batches(root, [[record(i) for i in range(n, n + 4)] for n in (0, 4, 8)])
    return root


def options(root: Path, **kw: Any) -> CaptureOptions:
    capture = CaptureSettings(store=root / hidden_states.STORE, layers=kw.pop("layers", LAYERS),
                              dtype=kw.pop("dtype", None), wait_seconds=kw.pop("wait_seconds", 5.0))
    return CaptureOptions(root=root, urls=(URL,), capture=capture, concurrency=kw.pop("concurrency", 3),
                          retry_backoff=0.0, progress_seconds=kw.pop("progress_seconds", 0),
                          connect_timeout=5, **kw)


def capture(root: Path, server: CaptureVllm, *, stop: StopSignal | None = None, **kw: Any):
    try:
        return run_capture(options(root, **kw), stop=stop, transport=server.transport)
    finally:
        server.settle()


def table_without_states(root: Path):
    table = eaglefeed.load(root)
    table = table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))
    return table.drop_columns(["hidden_states"]), table.column("hidden_states").to_pylist()


def check_every_row(root: Path) -> list[HiddenStatesRef]:
    """Every live row references one checked file of its own prompt + output[:-1]; the refs."""
    rows = eaglefeed.load(root, hidden_states=True)
    refs = []
    for row in rows:
        assert row["hidden_states"] is not None, row["id"]
        ref = row["hidden_states"].ref
        assert hidden_states.problem(root, ref) is None
        positions = row["input_ids"][:-1]
        check_file(root / ref.uri, token_ids=positions, layer_ids=LAYERS, dtype="float32")
        assert np.array_equal(row["hidden_states"].float32(), states_of(positions))
        assert ref.uri == f"hidden_states/{state_fill.final_name(row['id'])}"
        refs.append(ref)
    assert len({r.uri for r in refs}) == len(refs) == len({row["id"] for row in rows})
    return refs


def test_every_row_gets_its_states_and_nothing_else_changes(dataset):
    before, states_before = table_without_states(dataset)
    assert set(states_before) == {None}
    files_before = len(manifest.live_segments(manifest.read_manifest(dataset)))
    server = CaptureVllm(dataset / hidden_states.STORE)
    summary = capture(dataset, server)
    assert (summary.total, summary.captured, summary.failed, summary.rows_filled) == (12, 12, 0, 12)
    assert summary.files == files_before
    after, _ = table_without_states(dataset)
    assert after.equals(before)  # every other column, every row
    check_every_row(dataset)
    for body in server.bodies:  # prefill only: prompt + output[:-1], one token, greedy, stock capture
        assert body["sampling_params"] == {"max_tokens": 1, "temperature": 0.0}
        assert "kv_transfer_params" not in body
    rows = {tuple(ids[:-1]) for ids in eaglefeed.load(dataset).column("input_ids").to_pylist()}
    assert set(server.sent) == rows and set(server.sent.values()) == {1}
    events = [e for e in manifest.read_manifest(dataset) if e.get("kind") == state_fill.EVENT_KIND]
    assert len(events) == files_before and all(len(e["added"]) == len(e["removed"]) == 1 for e in events)
    done = collect(dataset, grace_seconds=0)
    assert (done.referenced, done.missing) == (12, 0)
    assert not list((dataset / "segments").glob(".*tmp"))
    again = CaptureVllm(dataset / hidden_states.STORE)
    second = capture(dataset, again)
    assert (second.total, second.requests, second.files) == (0, 0, 0) and again.bodies == []
    assert "12 of 12 rows without states now have them" in summary.line()


def test_a_stopped_run_resumed_sends_each_row_once_and_references_it_once(dataset):
    stop = StopSignal()
    first = CaptureVllm(dataset / hidden_states.STORE, on_request=lambda n: stop.set() if n == 5 else None)
    summary = capture(dataset, first, stop=stop, concurrency=2)
    assert summary.stopped and 5 <= summary.captured < 12
    assert "stopped: run again" in summary.line()
    partly = [ref for ref in table_without_states(dataset)[1] if ref is not None]
    assert len(partly) == summary.rows_filled < 12
    second = CaptureVllm(dataset / hidden_states.STORE)
    resumed = capture(dataset, second)
    assert not resumed.stopped and resumed.failed == 0
    assert resumed.total == 12 - summary.rows_filled
    assert resumed.reused == summary.captured - summary.rows_filled  # done, not yet in the rows: not sent
    sent = first.sent + second.sent
    assert len(sent) == 12 and set(sent.values()) == {1}
    refs = check_every_row(dataset)
    assert {r.uri: r for r in refs}.keys() >= {HiddenStatesRef.from_record(p).uri for p in partly}


def test_a_killed_run_leaves_files_that_the_next_run_adopts_instead_of_sending(dataset):
    """A kill after the server wrote a file: under the server's name, or already renamed to the row's."""
    store = dataset / hidden_states.STORE
    rows = eaglefeed.load(dataset).to_pylist()
    for n, row in enumerate(rows[:4]):
        positions = row["input_ids"][:-1]
        name = (state_fill.final_name(row["id"]) if n % 2 else
                f"generate-tokens-{state_fill.request_prefix(row['id'])}-1a2b3c4d-0000beef.safetensors")
        store_write.write_file(store / name, states=states_of(positions), token_ids=positions,
                                 layer_ids=LAYERS, num_hidden_layers=4, dtype="float32")
    wrong = rows[4]  # a leftover that does not check out (cut short, another layer set): sent again
    store_write.write_file(store / state_fill.final_name(wrong["id"]), states=states_of([1, 2], (1, 2)),
                             token_ids=[1, 2], layer_ids=(1, 2), num_hidden_layers=4, dtype="float32")
    server = CaptureVllm(store)
    summary = capture(dataset, server)
    assert (summary.reused, summary.captured) == (4, 8)
    assert tuple(wrong["input_ids"][:-1]) in server.sent
    assert not any(tuple(r["input_ids"][:-1]) in server.sent for r in rows[:4])
    check_every_row(dataset)


def test_a_server_without_capture_stops_in_one_line_and_nothing_is_rewritten(dataset):
    before = (dataset / manifest.MANIFEST).read_bytes()
    files = sorted(p.name for p in (dataset / "segments").iterdir())
    server = CaptureVllm(dataset / hidden_states.STORE, answer_path=False)
    with pytest.raises(ConfigError, match="no hidden_states_path") as err:
        capture(dataset, server)
    assert "\n" not in str(err.value) and "capture connector" in str(err.value)
    assert server.bodies == []  # the start-up probe said so: no row was sent
    assert (dataset / manifest.MANIFEST).read_bytes() == before
    assert sorted(p.name for p in (dataset / "segments").iterdir()) == files


def test_a_server_writing_where_the_dataset_does_not_see_stops_in_one_line(dataset, tmp_path):
    before = (dataset / manifest.MANIFEST).read_bytes()
    server = CaptureVllm(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="shared_storage_path must be that folder") as err:
        capture(dataset, server, wait_seconds=0.3)
    assert str(dataset / hidden_states.STORE) in str(err.value) and "\n" not in str(err.value)
    assert server.bodies == [] and (dataset / manifest.MANIFEST).read_bytes() == before


def test_other_layers_or_dtype_than_asked_stop_before_any_row(dataset):
    with pytest.raises(ConfigError, match="captures layers"):
        capture(dataset, CaptureVllm(dataset / hidden_states.STORE), layers=None)  # auto: [1, 2] of 4 layers
    with pytest.raises(ConfigError, match="stores float32, the run asks for bfloat16"):
        capture(dataset, CaptureVllm(dataset / hidden_states.STORE), dtype="bfloat16")


def test_a_file_that_does_not_match_is_retried_and_the_bad_one_left_to_gc(dataset):
    server = CaptureVllm(dataset / hidden_states.STORE, corrupt=2)
    summary = capture(dataset, server)
    assert (summary.captured, summary.failed, summary.requests) == (12, 0, 14)
    check_every_row(dataset)
    assert collect(dataset, grace_seconds=0).deleted == 2  # the two mismatching files


def test_rows_that_fail_stay_without_states_and_a_later_run_does_them(dataset):
    summary = capture(dataset, CaptureVllm(dataset / hidden_states.STORE, status=400), max_attempts=2)
    assert summary.failed == 12 and summary.failures == {"http_400": 12} and summary.files == 0
    assert "run again to retry them" in summary.line()
    assert set(table_without_states(dataset)[1]) == {None}
    assert capture(dataset, CaptureVllm(dataset / hidden_states.STORE)).rows_filled == 12
    check_every_row(dataset)


def test_rows_that_already_have_states_are_kept_and_hold_the_run_to_their_layers(dataset):
    """A dataset made partly with capture: its rows keep their files; the others get the same layers."""
    rows = eaglefeed.load(dataset).to_pylist()
    first = CaptureVllm(dataset / hidden_states.STORE)
    stop = StopSignal()
    first.on_request = lambda n: stop.set() if n == 4 else None  # the first file's 4 rows, one at a time
    capture(dataset, first, stop=stop, concurrency=1)
    kept = {r["id"]: r["hidden_states"] for r in eaglefeed.load(dataset).to_pylist() if r["hidden_states"]}
    assert 0 < len(kept) < len(rows)
    with pytest.raises(ConfigError, match=r"hold layers \[1, 2, 4\]; --hidden-states asks for \[1, 2\]"):
        capture(dataset, CaptureVllm(dataset / hidden_states.STORE, layers=(1, 2)), layers=(1, 2))
    with pytest.raises(ConfigError, match="captures layers"):  # auto is held to the rows' layers
        capture(dataset, CaptureVllm(dataset / hidden_states.STORE, layers=(1, 3)), layers=None)
    capture(dataset, CaptureVllm(dataset / hidden_states.STORE), layers=None)  # auto: [1, 2, 4], the rows'
    check_every_row(dataset)
    after = {r["id"]: r["hidden_states"] for r in eaglefeed.load(dataset).to_pylist()}
    assert all(after[row_id] == ref for row_id, ref in kept.items())


def test_a_compaction_meanwhile_moves_the_rows_and_they_are_done_in_its_shard(dataset):
    moved = []

    def compact_now(n: int) -> None:
        if n == 1:  # no file is being replaced yet: the compaction takes every segment
            moved.append(compact(dataset, CompactOptions(include_partial=True)).inputs)

    server = CaptureVllm(dataset / hidden_states.STORE, on_request=compact_now)
    summary = capture(dataset, server)
    assert moved == [3]
    assert (summary.total, summary.captured, summary.failed) == (12, 12, 0)
    assert set(server.sent.values()) == {1}  # the rows found in the shard were not sent again
    assert summary.rows_filled == 12 and summary.files == 1
    check_every_row(dataset)


def test_a_second_capture_on_the_same_dataset_is_refused(dataset):
    with manifest.locked(dataset, state_fill.CAPTURE_LOCK):
        with pytest.raises(ConfigError, match="another eaglefeed capture is running"):
            capture(dataset, CaptureVllm(dataset / hidden_states.STORE))


def test_not_a_dataset(tmp_path):
    with pytest.raises(eaglefeed.core.errors.DatasetError, match="not an eaglefeed dataset"):
        capture(tmp_path, CaptureVllm(tmp_path / hidden_states.STORE))
    assert not (tmp_path / manifest.MANIFEST).exists()


def test_progress_line_and_help():
    from eaglefeed.ops.capture_states import CaptureSummary

    line = progress_line(CaptureSummary(total=1000, captured=100, reused=20, files=3), 15.0)
    assert line == "capture: 120/1000 rows (12.0 %), 8.0 rows/s, ETA 1m50s; 3 files replaced, 0 failed"
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["capture"].format_help()
    for flag in ("--sglang-url", "--concurrency", "--hidden-states", "--hidden-states-dtype",
                 "--hidden-states-wait", "--api-key", "--progress-seconds", "--max-attempts"):
        assert flag in text
    args = parser.parse_args(["capture", "DIR", "--sglang-url", "http://h:1", "--concurrency", "4"])
    assert (args.sglang_urls, args.concurrency, args.hidden_states) == (["http://h:1"], 4, "auto")
