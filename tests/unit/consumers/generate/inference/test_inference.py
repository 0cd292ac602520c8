import asyncio
import json

import httpx
import pytest

from eaglefeed.consumers.generate.inference import InferenceClient, ServerPool, raise_for_status
from eaglefeed.consumers.generate.inference.engines import post
from eaglefeed.consumers.generate.inference.integrity import check_response
from eaglefeed.core.errors import ConfigError, FatalInferenceError, RetryableInferenceError

PARAMS = {"max_new_tokens": 8, "temperature": 0.0}


def sample(input_ids, output_ids=(7, 8, 2), completion=None, finish=None):
    return {"text": "x", "output_ids": list(output_ids), "meta_info": {
        "id": "r", "finish_reason": finish or {"type": "stop", "matched": 2},
        "prompt_tokens": len(input_ids),
        "completion_tokens": len(output_ids) if completion is None else completion,
        "cached_tokens": 0, "e2e_latency": 0.01}}


def run_client(responses, *, params=PARAMS, max_attempts=3, vocab_size=None, urls=("http://s1",)):
    """Drive InferenceClient against a scripted MockTransport; return (result or error, requests)."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model"})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.0"})
        body = json.loads(request.content)
        seen.append((request, body))
        item = responses[min(len(seen), len(responses)) - 1]
        if isinstance(item, Exception):
            raise item
        status, payload = item
        return httpx.Response(status, json=payload(body) if callable(payload) else payload)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler),
                                     headers={"Authorization": "Bearer k"}) as http:
            pool = ServerPool(client=http, urls=list(urls), eject_after=100, probe_interval=2.0)
            client = InferenceClient(pool=pool, http=http, concurrency=256, max_attempts=max_attempts,
                                     backoff=0.001, backoff_max=30.0)
            try:
                return await client.generate([1, 2, 3], params, rid="p-0", vocab_size=vocab_size)
            except Exception as exc:  # noqa: BLE001
                return exc

    return asyncio.run(go()), seen


def ok(body):
    return sample(body["input_ids"])


def test_sends_ids_and_explicit_params_and_stamps_server_info():
    result, seen = run_client([(200, ok)])
    (gen,) = result.generations
    assert gen.output_ids == [7, 8, 2] and gen.finish_reason == "stop" and gen.matched_stop == 2
    assert result.info.model_path == "demo/model" and result.info.engine_version == "0.5.0"
    assert result.attempts == 1
    request, body = seen[0]
    assert body["input_ids"] == [1, 2, 3] and body["sampling_params"] == PARAMS
    assert body["stream"] is False and body["rid"].startswith("p-0-1-")
    assert request.headers["Authorization"] == "Bearer k"


def test_retries_503_and_connection_errors_with_a_new_rid():
    result, seen = run_client([(503, {"message": "The request queue is full."}),
                               httpx.ConnectError("reset"), (200, ok)])
    assert result.attempts == 3
    assert len({body["rid"] for _r, body in seen}) == 3


def test_4xx_is_fatal_and_carries_the_server_message():
    result, seen = run_client([(400, {"error": {"message": "The input (9 tokens) is longer"}})])
    assert isinstance(result, FatalInferenceError)
    assert result.kind == "http_400" and "longer" in str(result) and result.attempts == 1
    assert len(seen) == 1


@pytest.mark.parametrize("status", [401, 404])
def test_a_wrong_key_or_url_stops_the_worker_instead_of_dead_lettering(status):
    result, seen = run_client([(status, {"error": "Unauthorized"})])
    assert isinstance(result, ConfigError) and "--api-key" in str(result) and len(seen) == 1


def test_contaminated_output_is_retried_then_given_up():
    bad = lambda body: sample(body["input_ids"], output_ids=(99, 98, 7, 8, 2), completion=3)  # noqa: E731
    result, seen = run_client([(200, bad)], max_attempts=2)
    assert isinstance(result, RetryableInferenceError) and result.kind == "integrity"
    assert result.attempts == 2 and len(seen) == 2


def test_n_samples_come_back_prompt_major_and_are_matched_by_position():
    params = {**PARAMS, "n": 3}
    outs = [(5, 2), (6, 6, 2), (7, 7, 7, 2)]
    body = lambda b: [sample(b["input_ids"], o) for o in outs]  # noqa: E731
    result, seen = run_client([(200, body)], params=params)
    assert [g.output_ids for g in result.generations] == [list(o) for o in outs]
    assert seen[0][1]["sampling_params"]["n"] == 3
    short, _ = run_client([(200, lambda b: [sample(b["input_ids"])] * 2)], params=params, max_attempts=1)
    assert isinstance(short, RetryableInferenceError) and short.kind == "integrity"


def test_output_ids_outside_the_vocabulary_are_rejected():
    result, _ = run_client([(200, lambda b: sample(b["input_ids"], (7, 4096, 2)))], vocab_size=4096,
                           max_attempts=1)
    assert isinstance(result, RetryableInferenceError) and "4096" in str(result)
    result, _ = run_client([(200, lambda b: sample(b["input_ids"], (7, 4095, 2)))], vocab_size=4096)
    assert result.generations[0].output_ids == [7, 4095, 2]


@pytest.mark.parametrize("mutate, kind", [
    (lambda b: b["meta_info"].update(finish_reason={"type": "abort", "message": "x"}), "abort"),
    (lambda b: b["meta_info"].update(prompt_tokens=99), "integrity"),
    (lambda b: b.update(output_ids=[7, 8, 3]), "integrity"),  # stop matched 2, last id 3
    (lambda b: b.update(output_ids=[]) or b["meta_info"].update(completion_tokens=0), "integrity"),
    (lambda b: b.update(output_ids=["a", 1, 2]), "integrity"),
    (lambda b: b.update(output_ids=[7, -1, 2]), "integrity"),  # schemas.validity, even without a vocab size
    (lambda b: b["meta_info"].update(finish_reason={"type": "stop", "matched": "NaN happened"}), "integrity"),
    (lambda b: b.update(output_ids=list(range(9))) or b["meta_info"].update(
        completion_tokens=9, finish_reason={"type": "length", "length": 9}), "integrity"),
])
def test_integrity_rules(mutate, kind):
    body = sample([1, 2, 3])
    mutate(body)
    with pytest.raises(RetryableInferenceError) as err:
        check_response(body, [1, 2, 3], PARAMS, endpoint="e", latency=0.0)
    assert err.value.kind == kind


def test_pool_picks_least_outstanding_ejects_failing_servers_and_probes_them_back():
    health = {"http://a": 503}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(health.get(f"{request.url.scheme}://{request.url.host}", 200))

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://a", "http://b"], eject_after=2, probe_interval=0.01)
            a, b = pool.servers
            first = await pool.acquire()
            second = await pool.acquire()
            assert {first.url, second.url} == {"http://a", "http://b"}  # spread by outstanding
            pool.release(first, failed=False)
            pool.release(second, failed=False)
            for _ in range(2):
                pool.release(await _take(pool, a), failed=True)
            assert not a.healthy
            assert [(await pool.acquire()).url for _ in range(3)] == ["http://b"] * 3
            await asyncio.sleep(0.05)
            assert not a.healthy  # /health still 503
            health["http://a"] = 200
            for _ in range(100):
                if a.healthy:
                    break
                await asyncio.sleep(0.01)
            assert a.healthy and (await pool.acquire()).url == "http://a"  # b has 3 outstanding
            await pool.close()

    asyncio.run(go())


async def _take(pool, server):
    server.outstanding += 1
    return server


def test_no_healthy_server_makes_requests_wait_instead_of_failing():
    calls = {"health": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            calls["health"] += 1
            return httpx.Response(200 if calls["health"] >= 3 else 503)
        return httpx.Response(200)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://a"], eject_after=1, probe_interval=0.01)
            pool.release(await _take(pool, pool.servers[0]), failed=True)
            server = await asyncio.wait_for(pool.acquire(), timeout=2)
            assert server.healthy and calls["health"] == 3
            await pool.close()

    asyncio.run(go())


def test_in_flight_counts_the_slots_of_the_requests_being_sent():
    seen = []

    async def go():
        async def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path in ("/model_info", "/server_info"):
                return httpx.Response(200, json={})
            seen.append(client.in_flight)
            return httpx.Response(200, json=[sample([1, 2, 3])] * 2)

        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://s"], eject_after=3, probe_interval=2.0)
            client = InferenceClient(pool=pool, http=http, concurrency=8, max_attempts=1, backoff=0.0,
                                     backoff_max=0.0)
            assert client.in_flight == 0
            await client.generate([1, 2, 3], {**PARAMS, "n": 2}, rid="p")
            return client.in_flight

    assert asyncio.run(go()) == 0
    assert seen == [2]


def test_the_engines_post_compact_json_and_translate_transport_failures():
    failures = iter([None, httpx.ConnectError("refused"), httpx.ReadTimeout("slow"),
                     httpx.ReadError("reset")])

    def handler(request: httpx.Request) -> httpx.Response:
        failure = next(failures)
        if failure is not None:
            raise failure
        return httpx.Response(418, content=request.content, headers=request.headers)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://s/"], eject_after=3, probe_interval=2.0)
            server = pool.servers[0]
            resp = await post(client=http, server=server, path="/generate", body={"a": [1, 2]})
            kinds = []
            for _ in range(3):
                with pytest.raises(RetryableInferenceError) as err:
                    await post(client=http, server=server, path="/generate", body={})
                kinds.append(err.value.kind)
            return resp, kinds

    resp, kinds = asyncio.run(go())
    assert resp.status_code == 418 and resp.content == b'{"a":[1,2]}'  # any status is the caller's
    assert resp.headers["Content-Type"] == "application/json" and str(resp.url) == "http://s/generate"
    assert kinds == ["connect", "timeout", "transport"]


def test_retry_after_is_read_from_the_response_and_bounds_the_delay_from_below():
    request = httpx.Request("POST", "http://s/generate")
    with pytest.raises(RetryableInferenceError) as err:
        raise_for_status(httpx.Response(429, headers={"Retry-After": "3"}, json={"message": "slow down"},
                                        request=request))
    assert err.value.retry_after == 3.0 and err.value.kind == "http_429" and str(err.value) == "slow down"
    with pytest.raises(RetryableInferenceError) as err:
        raise_for_status(httpx.Response(503, text="busy", request=request))
    assert err.value.retry_after is None
    http = httpx.AsyncClient()
    pool = ServerPool(client=http, urls=["http://s"], eject_after=3, probe_interval=2.0)
    client = InferenceClient(pool=pool, http=http, concurrency=1, max_attempts=2, backoff=0.001,
                             backoff_max=10.0)
    assert client.delay(1, RetryableInferenceError("http_429", "x", retry_after=3.0)) == 3.0
    assert client.delay(1, RetryableInferenceError("http_429", "x", retry_after=60.0)) == 10.0
    assert client.delay(1, RetryableInferenceError("timeout", "x")) <= 0.001
