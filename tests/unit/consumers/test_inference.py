import asyncio
import json

import httpx
import pytest

from consumers.inference import InferenceClient, check_response
from eaglefeed.errors import FatalInferenceError, RetryableInferenceError

PARAMS = {"max_new_tokens": 8, "temperature": 0.0}


def ok_body(input_ids, output_ids=(7, 8, 2), completion=None):
    return {"text": "x", "output_ids": list(output_ids), "meta_info": {
        "id": "r", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": len(input_ids),
        "completion_tokens": len(output_ids) if completion is None else completion,
        "cached_tokens": 0, "e2e_latency": 0.01}}


def run_client(responses, max_attempts=3):
    """Drive InferenceClient against a scripted MockTransport; return (result or error, requests)."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model"})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.0"})
        body = json.loads(request.content)
        seen.append(body)
        item = responses[min(len(seen), len(responses)) - 1]
        if isinstance(item, Exception):
            raise item
        status, payload = item
        return httpx.Response(status, json=payload(body["input_ids"]) if callable(payload) else payload)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = InferenceClient(client=http, urls=["http://s1"], max_attempts=max_attempts,
                                     backoff=0.001)
            try:
                return await client.generate([1, 2, 3], PARAMS, rid_prefix="p-0")
            except Exception as exc:  # noqa: BLE001
                return exc

    return asyncio.run(go()), seen


def test_sends_ids_and_explicit_params_and_stamps_server_info():
    result, seen = run_client([(200, ok_body)])
    gen, info, attempts = result
    assert gen.output_ids == [7, 8, 2] and gen.finish_reason == "stop" and gen.matched_stop == 2
    assert info.model_path == "demo/model" and info.engine_version == "0.5.0"
    assert attempts == 1
    assert seen[0]["input_ids"] == [1, 2, 3] and seen[0]["sampling_params"] == PARAMS
    assert seen[0]["stream"] is False and seen[0]["rid"].startswith("p-0-1-")


def test_retries_503_and_connection_errors_with_a_new_rid():
    result, seen = run_client([(503, {"message": "The request queue is full."}),
                               httpx.ConnectError("reset"), (200, ok_body)])
    assert result[2] == 3
    assert len({b["rid"] for b in seen}) == 3


def test_4xx_is_fatal_and_carries_the_server_message():
    result, seen = run_client([(400, {"error": {"message": "The input (9 tokens) is longer"}})])
    assert isinstance(result, FatalInferenceError)
    assert result.kind == "http_400" and "longer" in str(result)
    assert len(seen) == 1


def test_contaminated_output_is_retried_then_given_up():
    bad = lambda ids: ok_body(ids, output_ids=(99, 98, 7, 8, 2), completion=3)  # noqa: E731
    result, seen = run_client([(200, bad)], max_attempts=2)
    assert isinstance(result, RetryableInferenceError) and result.kind == "integrity"
    assert len(seen) == 2


@pytest.mark.parametrize("mutate, kind", [
    (lambda b: b["meta_info"].update(finish_reason={"type": "abort", "message": "x"}), "abort"),
    (lambda b: b["meta_info"].update(prompt_tokens=99), "integrity"),
    (lambda b: b.update(output_ids=[7, 8, 3]), "integrity"),  # stop matched 2, last id 3
    (lambda b: b.update(output_ids=[]) or b["meta_info"].update(completion_tokens=0), "integrity"),
    (lambda b: b.update(output_ids=["a", 1, 2]), "integrity"),
])
def test_integrity_rules(mutate, kind):
    body = ok_body([1, 2, 3])
    mutate(body)
    with pytest.raises(RetryableInferenceError) as err:
        check_response(body, [1, 2, 3], PARAMS, endpoint="e", latency=0.0)
    assert err.value.kind == kind
