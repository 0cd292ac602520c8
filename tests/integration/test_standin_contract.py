"""The SGLang stand-in honours SGLang's native HTTP contract, checked over real HTTP.

Servers run in-process on a background event loop with a real TCP site on 127.0.0.1 (one per
configuration, shared by the module); one test also starts ``python -m eaglefeed.devtools.standin``.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin import StandinConfig
from eaglefeed.devtools.standin.config import FaultRates
from eaglefeed.devtools.standin.server import RunningServer, start_server
from eaglefeed.devtools.standin.vocab import Vocab, load_vocab
from tests.running import wait_until

FAST = {
    "prefill_ms_per_token": 0.0,
    "decode_step_ms": 0.2,
    "decode_step_ms_per_running": 0.0,
    "output_len_mean": 40.0,
    "think_fraction": 0.0,
    "tool_call_fraction": 0.0,
    "length_fraction": 0.0,
}
SLOW = {**FAST, "decode_step_ms": 20.0}
PROMPT = [1, 300, 301, 302, 303, 2, 1, 400, 401, 402]


class ServerThread:
    """A stand-in on its own event loop in a daemon thread."""

    def __init__(self, config: StandinConfig, vocab: Vocab) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: RunningServer = self._call(start_server(config, vocab=vocab))
        self.url = self.server.url

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self._call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return load_vocab(TOKENIZER_DIR)


@pytest.fixture(scope="module")
def serve(vocab: Vocab) -> Iterator[Callable[..., str]]:
    """Factory: a base URL for a stand-in with these config overrides (cached per config)."""
    servers: dict[str, ServerThread] = {}

    def start(**overrides: Any) -> str:
        key = repr(sorted(overrides.items()))
        if key not in servers:
            settings = {**FAST, **overrides}
            config = StandinConfig(tokenizer=TOKENIZER_DIR, port=0, **settings)
            servers[key] = ServerThread(config, vocab)
        return servers[key].url

    yield start
    for server in servers.values():
        server.close()


@pytest.fixture(scope="module")
def url(serve: Callable[..., str]) -> str:
    return serve()


@pytest.fixture(scope="module")
def slow_url(serve: Callable[..., str]) -> str:
    return serve(**SLOW)


def generate(url: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=kwargs.pop("timeout", 30), **kwargs)


def ok(url: str, body: Any) -> Any:
    response = generate(url, body)
    assert response.status_code == 200, response.text
    return response.json()


def sse(response: httpx.Response) -> list[Any]:
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    text = response.text
    assert text.endswith("data: [DONE]\n\n")
    events = [block for block in text.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in events)
    return [json.loads(block[6:]) for block in events[:-1]]


def tid(vocab: Vocab, token: str) -> int:
    token_id = vocab.tokenizer.token_to_id(token)
    assert token_id is not None
    return token_id


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    total = 0.0
    for line in text.splitlines():
        match = re.match(r"^([^{\s]+)(?:\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


def running(url: str) -> float:
    return metric(url, "sglang:num_running_reqs")


# --- /generate shapes --------------------------------------------------------------------


def test_single_request_shape(url: str, vocab: Vocab) -> None:
    out = ok(url, {"input_ids": PROMPT, "rid": "single-1", "sampling_params": {"temperature": 0.7}})
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    for key in (
        "id",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "e2e_latency",
        "weight_version",
    ):
        assert key in meta
    assert meta["id"] == "single-1" and meta["weight_version"] == "default"
    assert meta["prompt_tokens"] == len(PROMPT)
    ids = out["output_ids"]
    assert meta["finish_reason"] == {"type": "stop", "matched": tid(vocab, "<|im_end|>")}
    assert ids[-1] == tid(vocab, "<|im_end|>") and meta["completion_tokens"] == len(ids)
    assert out["text"] == vocab.decode(ids[:-1]) and meta["e2e_latency"] > 0
    # finished requests carry the weight versions that produced them (as SGLang's meta_info does)
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": len(ids)}]


def test_put_and_text_prompts(url: str, vocab: Vocab) -> None:
    put = httpx.put(f"{url}/generate", json={"input_ids": PROMPT})
    assert put.status_code == 200 and "output_ids" in put.json()
    out = ok(url, {"text": "hello there", "return_prompt_token_ids": True})
    assert out["prompt_token_ids"] == vocab.encode("hello there")
    assert out["meta_info"]["prompt_tokens"] == len(vocab.encode("hello there"))


def test_batch_and_rids(url: str) -> None:
    out = ok(url, {"input_ids": [PROMPT, PROMPT[:5]], "rid": "batch"})
    assert [o["meta_info"]["id"] for o in out] == ["batch_0", "batch_1"]
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [len(PROMPT), 5]
    out = ok(
        url,
        {
            "input_ids": [PROMPT, PROMPT],
            "rid": ["x", "y"],
            "sampling_params": [{"max_new_tokens": 3}, {"max_new_tokens": 4}],
        },
    )
    assert [(o["meta_info"]["id"], len(o["output_ids"])) for o in out] == [("x", 3), ("y", 4)]
    dup = generate(url, {"input_ids": [PROMPT, PROMPT], "rid": ["x", "x"]})
    assert (
        dup.status_code == 400
        and "Duplicate request IDs detected within the request" in dup.json()["error"]["message"]
    )


def test_n_is_prompt_major_with_fresh_ids(url: str) -> None:
    one = ok(url, {"input_ids": PROMPT, "rid": "nn", "sampling_params": {"n": 3}})
    assert isinstance(one, list) and len(one) == 3
    ids = [o["meta_info"]["id"] for o in one]
    assert len(set(ids)) == 3 and "nn" not in ids and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len({tuple(o["output_ids"]) for o in one}) == 3
    out = ok(url, {"input_ids": [PROMPT, PROMPT[:4]], "sampling_params": {"n": 2, "max_new_tokens": 5}})
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [len(PROMPT), len(PROMPT), 4, 4]
    greedy = ok(url, {"input_ids": PROMPT, "sampling_params": {"n": 2, "temperature": 0}})
    assert greedy[0]["output_ids"] == greedy[1]["output_ids"]


def test_default_max_new_tokens_is_128(serve: Callable[..., str]) -> None:
    out = ok(serve(length_fraction=1.0), {"input_ids": PROMPT})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 128}
    assert len(out["output_ids"]) == out["meta_info"]["completion_tokens"] == 128


def test_finish_reasons(url: str, vocab: Vocab) -> None:
    natural = ok(url, {"input_ids": PROMPT})["output_ids"]
    short = ok(url, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5}})
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert short["output_ids"] == natural[:5]
    target = natural[3]
    stopped = ok(url, {"input_ids": PROMPT, "sampling_params": {"stop_token_ids": [target]}})
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}
    assert stopped["output_ids"] == natural[: natural.index(target) + 1]
    piece = vocab.decode(natural[8:10], skip_special_tokens=False).strip()
    by_string = ok(url, {"input_ids": PROMPT, "sampling_params": {"stop": [piece]}})
    assert by_string["meta_info"]["finish_reason"] == {"type": "stop", "matched": piece}
    assert piece not in by_string["text"]
    assert by_string["meta_info"]["completion_tokens"] == len(by_string["output_ids"])
    assert piece in vocab.decode(by_string["output_ids"], skip_special_tokens=False)
    untrimmed = ok(url, {"input_ids": PROMPT, "sampling_params": {"stop": [piece], "no_stop_trim": True}})
    assert piece in untrimmed["text"]
    no_eos = ok(url, {"input_ids": PROMPT, "sampling_params": {"ignore_eos": True, "max_new_tokens": 300}})
    assert no_eos["meta_info"]["finish_reason"] == {"type": "length", "length": 300}
    longer = ok(url, {"input_ids": PROMPT, "sampling_params": {"min_new_tokens": len(natural) + 10}})
    assert len(longer["output_ids"]) == len(natural) + 11 and longer["output_ids"][-1] == natural[-1]


def test_determinism_across_servers_and_seeds(url: str, serve: Callable[..., str]) -> None:
    body = {"input_ids": PROMPT, "sampling_params": {"sampling_seed": 11, "temperature": 0.8}}
    first = ok(url, body)["output_ids"]
    assert ok(url, body)["output_ids"] == first
    assert ok(serve(decode_step_ms=0.1), body)["output_ids"] == first
    other = ok(url, {"input_ids": PROMPT, "sampling_params": {"sampling_seed": 12, "temperature": 0.8}})
    assert other["output_ids"] != first


def test_think_and_tool_blocks_when_fractions_are_one(serve: Callable[..., str], vocab: Vocab) -> None:
    think_url = serve(think_fraction=1.0)
    think, end_think = tid(vocab, "<think>"), tid(vocab, "</think>")
    out = ok(think_url, {"input_ids": PROMPT})["output_ids"]
    assert out[0] == think and end_think in out
    disabled = (
        PROMPT
        + [think]
        + vocab.tokenizer.encode("\n\n", add_special_tokens=False).ids
        + [end_think]
        + vocab.tokenizer.encode("\n\n", add_special_tokens=False).ids
    )
    assert think not in ok(think_url, {"input_ids": disabled})["output_ids"]
    tool_url = serve(tool_call_fraction=1.0)
    call, end_call = tid(vocab, "<tool_call>"), tid(vocab, "</tool_call>")
    tools_prompt = PROMPT + vocab.tokenizer.encode("inside <tools></tools>:\n<tools>\n{}\n</tools>").ids
    out = ok(tool_url, {"input_ids": tools_prompt})
    assert call in out["output_ids"] and end_call in out["output_ids"]
    assert out["output_ids"][-1] == tid(vocab, "<|im_end|>")
    assert call not in ok(tool_url, {"input_ids": PROMPT})["output_ids"]


def test_prefix_cache_and_flush(url: str) -> None:
    prompt = list(range(100, 164))
    assert ok(url, {"input_ids": prompt})["meta_info"]["cached_tokens"] == 0
    assert ok(url, {"input_ids": prompt})["meta_info"]["cached_tokens"] == 63
    flushed = httpx.post(f"{url}/flush_cache")
    assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")
    assert ok(url, {"input_ids": prompt})["meta_info"]["cached_tokens"] == 0


def test_the_next_turn_hits_the_output_cached_here_not_on_another_server(serve: Callable[..., str]) -> None:
    first, other = serve(random_seed=11), serve(random_seed=12)  # two servers, two caches
    prompt = list(range(200, 264))
    out = ok(first, {"input_ids": prompt, "sampling_params": {"max_new_tokens": 64, "temperature": 0.0}})
    following = [*prompt, *out["output_ids"], *range(300, 320)]
    cached = ok(first, {"input_ids": following})["meta_info"]["cached_tokens"]
    assert len(prompt) + len(out["output_ids"]) - 1 - 16 < cached <= len(prompt) + len(out["output_ids"]) - 1
    assert ok(other, {"input_ids": following})["meta_info"]["cached_tokens"] == 0


# --- streaming ----------------------------------------------------------------------------


def test_stream_is_cumulative_by_default(url: str) -> None:
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 30}}
    final = ok(url, body)
    chunks = sse(httpx.post(f"{url}/generate", json={**body, "stream": True}))
    assert len(chunks) > 1
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
        assert before["meta_info"]["finish_reason"] is None
    last = chunks[-1]
    assert last["output_ids"] == final["output_ids"] and last["text"] == final["text"]
    assert last["meta_info"]["finish_reason"] == final["meta_info"]["finish_reason"]
    assert last["meta_info"]["completion_tokens"] == len(last["output_ids"])
    assert "weight_versions" not in chunks[0]["meta_info"] and last["meta_info"]["weight_versions"]


def test_stream_deltas_with_incremental_flag(serve: Callable[..., str]) -> None:
    inc_url = serve(incremental_streaming_output=True)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 30, "stop": ["zzzz"]}}
    final = ok(inc_url, body)
    chunks = sse(httpx.post(f"{inc_url}/generate", json={**body, "stream": True}))
    assert len(chunks) > 1
    assert sum((c["output_ids"] for c in chunks), []) == final["output_ids"]
    assert "".join(c["text"] for c in chunks) == final["text"]


def test_batch_stream_carries_index(url: str) -> None:
    body = {"input_ids": [PROMPT, PROMPT[:6]], "sampling_params": {"max_new_tokens": 4}, "stream": True}
    chunks = sse(httpx.post(f"{url}/generate", json=body))
    assert {c["index"] for c in chunks} == {0, 1}
    finals = [c for c in chunks if c["meta_info"]["finish_reason"] is not None]
    assert sorted(c["index"] for c in finals) == [0, 1]


def test_stream_value_error_is_an_sse_error(url: str) -> None:
    body = {"input_ids": PROMPT, "sampling_params": {"temperature": -1}, "stream": True}
    chunks = sse(httpx.post(f"{url}/generate", json=body))
    assert chunks == [{"error": {"message": "temperature must be non-negative, got -1.0."}}]


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"input_ids": [5] * 8192},
            "The input (8192 tokens) is longer than the model's context length (8192 tokens).",
        ),
        (
            {"input_ids": [5] * 8000, "sampling_params": {"max_new_tokens": 500}},
            "Requested token count exceeds the model's maximum context length of 8192 tokens.",
        ),
        ({"input_ids": []}, "input_ids cannot be empty."),
        ({"input_ids": PROMPT, "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1], got 0.0."),
        ({"input_ids": PROMPT, "sampling_params": {"top_k": 0}}, "top_k must be -1 (disable), or at least 1"),
        ({"input_ids": PROMPT, "sampling_params": {"min_p": 2}}, "min_p must be in [0, 1]"),
        (
            {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": -1}},
            "max_new_tokens must be at least 0",
        ),
        (
            {"input_ids": PROMPT, "sampling_params": {"repetition_penalty": 3}},
            "repetition_penalty must be in (0, 2]",
        ),
        ({"input_ids": PROMPT, "return_logprob": True}, "return_logprob is not supported"),
    ],
)
def test_value_errors_are_400_error_objects(url: str, body: Any, message: str) -> None:
    response = generate(url, body)
    assert response.status_code == 400
    assert set(response.json()) == {"error"}
    assert response.json()["error"]["message"].startswith(message)


def test_malformed_requests_get_the_bad_request_envelope(url: str) -> None:
    for content in (b"{not json", b'{"input_ids": "abc"}', b'{"input_ids": [1, "x"]}'):
        response = httpx.post(f"{url}/generate", content=content)
        assert response.status_code == 400
        body = response.json()
        assert body["object"] == "error" and body["type"] == "Bad Request" and body["code"] == 400
        assert body["param"] is None and body["message"]


def test_unknown_or_mistyped_sampling_keys_are_400_with_the_schema_gate_text(url: str) -> None:
    """SGLang 0.5.23's contract gate (``api_contract.py``): 400 ``{"error": "<text>"}``, a plain string."""
    response = generate(url, {"input_ids": PROMPT, "sampling_params": {"seed": 1}})
    assert response.status_code == 400
    text = response.json()["error"]
    assert text.startswith("unknown field `seed`, expected one of `max_new_tokens`, `stop`")
    response = generate(url, {"input_ids": PROMPT, "sampling_params": {"top_k": 1.5}})
    assert response.status_code == 400
    assert response.json() == {"error": "invalid type: floating point `1.5`, expected i64"}


def test_queue_full_is_503(serve: Callable[..., str]) -> None:
    tiny = serve(**SLOW, max_running_requests=1, max_queued_requests=1)
    long = {"input_ids": PROMPT, "sampling_params": {"ignore_eos": True, "max_new_tokens": 30}}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(generate, tiny, long)
        wait_until(lambda: running(tiny) == 1)
        second = pool.submit(generate, tiny, long)
        wait_until(lambda: metric(tiny, "sglang:num_queue_reqs") == 1)
        rejected = generate(tiny, long)
        assert first.result().status_code == 200 and second.result().status_code == 200
    assert rejected.status_code == 503
    assert rejected.json() == {
        "object": "error",
        "message": "The request queue is full.",
        "type": "503",
        "param": None,
        "code": 503,
    }


def test_duplicate_in_flight_rid_and_abort_request(slow_url: str) -> None:
    long = {
        "input_ids": PROMPT,
        "rid": "busy",
        "sampling_params": {"ignore_eos": True, "max_new_tokens": 500},
    }
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(generate, slow_url, long)
        wait_until(lambda: running(slow_url) >= 1)
        time.sleep(0.1)
        dup = generate(slow_url, {"input_ids": PROMPT, "rid": "busy"})
        assert dup.status_code == 400
        assert dup.json() == {"error": {"message": "Duplicate request ID detected: busy"}}
        refused = httpx.post(f"{slow_url}/flush_cache")
        assert refused.status_code == 400 and refused.text.startswith("Cache not flushed.")
        assert httpx.post(f"{slow_url}/abort_request", json={"rid": "busy"}).status_code == 200
        out = pending.result().json()
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["finish_reason"]["message"]
    assert 0 < len(out["output_ids"]) < 500 and meta["completion_tokens"] == len(out["output_ids"])


def test_abort_all(slow_url: str) -> None:
    body = {"input_ids": [PROMPT, PROMPT[:5]], "sampling_params": {"ignore_eos": True, "max_new_tokens": 500}}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(generate, slow_url, body)
        wait_until(lambda: running(slow_url) >= 2)
        httpx.post(f"{slow_url}/abort_request", json={"rid": "", "abort_all": True})
        out = pending.result().json()
    assert [o["meta_info"]["finish_reason"]["type"] for o in out] == ["abort", "abort"]


# --- other endpoints ----------------------------------------------------------------------


def test_health_and_info(url: str, serve: Callable[..., str]) -> None:
    for path in ("/health", "/health_generate"):
        response = httpx.get(f"{url}{path}")
        assert response.status_code == 200 and response.content == b""
    starting = serve(startup_seconds=600.0)
    assert httpx.get(f"{starting}/health").status_code == 503
    assert httpx.get(f"{starting}/health_generate").status_code == 503
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(f"{url}{path}").json()
        assert set(info) == {  # SGLang 0.5.23's http_server.model_info
            "model_path",
            "served_model_name",
            "tokenizer_path",
            "is_generation",
            "preferred_sampling_params",
            "weight_version",
            "load_format",
            "reasoning_parser",
            "tool_call_parser",
            "disaggregation_mode",
            "has_image_understanding",
            "has_audio_understanding",
            "model_type",
            "architectures",
        }
        assert info["model_path"] == "eaglefeed/standin-demo" and info["is_generation"] is True
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(f"{url}{path}").json()
        assert info["version"] == "0.0.0-eaglefeed-standin" and info["eaglefeed_standin"] is True
        assert info["frontend"] == "python" and isinstance(info["startup_time"], dict)
        for key in (
            "context_length",
            "served_model_name",
            "max_running_requests",
            "max_queued_requests",
            "max_total_num_tokens",
            "max_req_input_len",
        ):
            assert key in info
        assert info["context_length"] == 8192 and isinstance(info["internal_states"], list)
        assert "last_gen_throughput" in info["internal_states"][0]


def test_metrics_names_and_labels(url: str) -> None:
    ok(url, {"input_ids": PROMPT})
    text = httpx.get(f"{url}/metrics").text
    scheduler = 'engine_type="unified",model_name="eaglefeed/standin-demo",pp_rank="0",tp_rank="0"'
    for gauge in (
        "num_running_reqs",
        "num_queue_reqs",
        "gen_throughput",
        "token_usage",
        "cache_hit_rate",
        "utilization",
    ):
        assert f"# TYPE sglang:{gauge} gauge" in text
        assert f"sglang:{gauge}{{{scheduler}}}" in text
    for counter in (
        "prompt_tokens",
        "generation_tokens",
        "num_requests",
        "num_aborted_requests",
        "cached_tokens",
    ):
        assert f"# TYPE sglang:{counter}_total counter" in text or f"# TYPE sglang:{counter} counter" in text
        assert f'sglang:{counter}_total{{engine_type="unified",model_name="eaglefeed/standin-demo"}}' in text
    for histogram in ("e2e_request_latency_seconds", "time_to_first_token_seconds", "queue_time_seconds"):
        assert f"# TYPE sglang:{histogram} histogram" in text
        assert f"sglang:{histogram}_count{{" in text
    for name in (
        "eaglefeed_standin_running_request_seconds_total",
        "eaglefeed_standin_max_running_requests",
        "eaglefeed_standin_uptime_seconds",
    ):
        assert re.search(rf"^{name} \S+$", text, re.MULTILINE), name
    assert metric(url, "sglang:num_requests_total") >= 1
    assert metric(url, "sglang:generation_tokens_total") >= 1


def test_busy_fraction_grows_under_load(serve: Callable[..., str]) -> None:
    busy = serve(**{**SLOW, "decode_step_ms": 5.0}, max_running_requests=4)
    name = "eaglefeed_standin_running_request_seconds_total"
    before, started = metric(busy, name), time.monotonic()
    body = {"input_ids": PROMPT, "sampling_params": {"ignore_eos": True, "max_new_tokens": 40}}
    with ThreadPoolExecutor(4) as pool:
        assert all(r.status_code == 200 for r in pool.map(lambda _: generate(busy, body), range(8)))
    delta, elapsed = metric(busy, name) - before, time.monotonic() - started
    fraction = delta / (elapsed * metric(busy, "eaglefeed_standin_max_running_requests"))
    assert 0.3 < fraction <= 1.0


def test_api_key(serve: Callable[..., str]) -> None:
    keyed = serve(api_key="s3cret")
    assert generate(keyed, {"input_ids": PROMPT}).status_code == 401
    assert (
        generate(keyed, {"input_ids": PROMPT}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    )
    assert (
        generate(keyed, {"input_ids": PROMPT}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    )
    assert httpx.get(f"{keyed}/model_info").status_code == 401
    assert httpx.get(f"{keyed}/health").status_code == 200
    assert httpx.get(f"{keyed}/metrics").status_code == 200
    assert (
        httpx.get(f"{keyed}/server_info", headers={"Authorization": "Bearer s3cret"}).json()["api_key"]
        != "s3cret"
    )


# --- faults -------------------------------------------------------------------------------


def faulty(serve: Callable[..., str], **rates: float) -> str:
    return serve(latency_model="none", faults=FaultRates(hang_seconds=3600.0, **rates))


def fault_count(url: str, kind: str) -> float:
    return metric(url, "eaglefeed_standin_faults_injected_total", kind=kind)


def test_fault_503_and_500(serve: Callable[..., str]) -> None:
    url = faulty(serve, http_503=1.0)
    response = generate(url, {"input_ids": PROMPT})
    assert response.status_code == 503 and response.json()["message"] == "The request queue is full."
    url = faulty(serve, http_500=1.0)
    response = generate(url, {"input_ids": PROMPT})
    assert response.status_code == 500
    assert response.json()["object"] == "error" and response.json()["code"] == 500
    assert fault_count(url, "500") == 1


def test_fault_reset(serve: Callable[..., str]) -> None:
    url = faulty(serve, reset=1.0)
    with pytest.raises(httpx.TransportError):
        generate(url, {"input_ids": PROMPT})
    assert fault_count(url, "reset") == 1
    assert httpx.get(f"{url}/health").status_code == 200


def test_fault_hang_outlasts_the_client_timeout(serve: Callable[..., str]) -> None:
    url = faulty(serve, hang=1.0)
    with pytest.raises(httpx.ReadTimeout):
        generate(url, {"input_ids": PROMPT, "rid": "stuck"}, timeout=0.5)
    assert fault_count(url, "hang") == 1
    time.sleep(0.2)  # the server cancels the abandoned request and releases its rid
    with pytest.raises(httpx.ReadTimeout):  # a duplicate-rid 400 would come back at once
        generate(url, {"input_ids": PROMPT, "rid": "stuck"}, timeout=0.5)


def test_fault_abort_keeps_partial_output(serve: Callable[..., str]) -> None:
    url = faulty(serve, abort=1.0)
    out = ok(url, {"input_ids": PROMPT, "sampling_params": {"ignore_eos": True, "max_new_tokens": 20}})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(out["output_ids"]) == out["meta_info"]["completion_tokens"] == 10


def test_fault_contaminate_breaks_the_length_invariant(serve: Callable[..., str], url: str) -> None:
    dirty = faulty(serve, contaminate=1.0)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12}}
    out = ok(dirty, body)
    clean = ok(url, body)
    assert out["meta_info"]["completion_tokens"] == 12 == len(out["output_ids"]) - 5
    assert out["output_ids"] == PROMPT[-5:] + clean["output_ids"]
    assert out["text"] == clean["text"]


def test_faults_are_reproducible_from_the_seed(serve: Callable[..., str]) -> None:
    def codes(url: str) -> list[int]:
        return [generate(url, {"input_ids": PROMPT}).status_code for _ in range(12)]

    rates = FaultRates(http_503=0.5, http_500=0.3)
    first = codes(serve(latency_model="none", faults=rates))
    second = codes(serve(latency_model="none", faults=rates, random_seed=1))  # a second server
    assert first == second and {503, 500} <= set(first)


# --- the real process ---------------------------------------------------------------------


def test_module_entry_point_serves_and_stops_on_sigterm() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eaglefeed.devtools.standin", "--port", str(port), "--decode-step-ms", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    long = {"input_ids": PROMPT, "sampling_params": {"ignore_eos": True, "max_new_tokens": 5000}}
    signalled = False
    try:
        wait_until(lambda: _healthy(base), timeout=30)
        short = ok(base, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3}})
        assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(generate, base, long)
            wait_until(lambda: running(base) == 1)
            proc.send_signal(signal.SIGTERM)
            signalled = True
            in_flight = pending.result()
    finally:
        if not signalled:
            proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output
    assert "STAND-IN" in output
    assert in_flight.status_code == 200  # in-flight work is aborted, not dropped, on shutdown
    assert in_flight.json()["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "The server is shutting down.",
    }


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False
