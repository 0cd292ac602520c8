"""The vLLM backend and engine detection, against scripted HTTP responses in vLLM's shapes."""

import asyncio
import json

import httpx
import pytest

from eaglefeed.consumers.generate.inference import (
    InferenceClient,
    Server,
    ServerInfo,
    ServerPool,
    vllm_sampling_params,
)
from eaglefeed.consumers.generate.inference.engines import ENGINES_BY_NAME, Call, vllm_generations
from eaglefeed.core.errors import ConfigError, FatalInferenceError, RetryableInferenceError

PROMPT = [1, 2, 3]
PARAMS = {"max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
          "sampling_seed": 5, "skip_special_tokens": False, "no_stop_trim": True}
VLLM_INFO = {"/version": {"version": "0.32.0"},
             "/v1/models": {"object": "list", "data": [{"id": "tiny", "owned_by": "vllm", "root": "/m/tiny",
                                                        "max_model_len": 2048}]}}
SGLANG_INFO = {"/model_info": {"model_path": "demo/model"}, "/server_info": {"version": "0.5.0"}}


def choice(ids, finish="length", stop=None, index=0, **extra):
    return {"index": index, "finish_reason": finish, "stop_reason": stop, "token_ids": list(ids), **extra}


def answer(*choices, prompt=3, completion=None):
    total = sum(len(c["token_ids"]) for c in choices) if completion is None else completion
    return {"request_id": "generate-tokens-x", "model": "tiny", "choices": list(choices),
            "usage": {"prompt_tokens": prompt, "completion_tokens": total, "total_tokens": prompt + total,
                      "prompt_tokens_details": None}}


def run(routes, *, params=PARAMS, engine="auto", max_attempts=2):
    """Drive InferenceClient against a scripted server; routes map paths to (status, body) or a callable."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST":
            seen.append((path, json.loads(request.content)))
        item = routes.get(path, (404, {"detail": "Not Found"}))
        if callable(item):
            item = item(json.loads(request.content))
        if path in VLLM_INFO or path in SGLANG_INFO:
            item = item if isinstance(item, tuple) else (200, item)
        return httpx.Response(item[0], json=item[1])

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://v"], eject_after=100, probe_interval=2.0,
                              engine=engine)
            client = InferenceClient(pool=pool, http=http, concurrency=8, max_attempts=max_attempts,
                                     backoff=0.001, backoff_max=0.01)
            try:
                return await client.generate(PROMPT, params, rid="p-0", vocab_size=4096)
            except Exception as exc:  # noqa: BLE001
                return exc

    return asyncio.run(go()), seen


def test_params_are_translated_to_vllm_names_and_text_only_settings_dropped():
    out = vllm_sampling_params({**PARAMS, "stop_token_ids": [2], "n": 3})
    assert out == {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "seed": 5,
                   "stop_token_ids": [2], "n": 3}


def test_auto_detects_vllm_and_uses_the_native_route():
    routes = {**VLLM_INFO, "/inference/v1/generate": (200, answer(choice([7, 8, 9, 2], "stop", 2)))}
    result, seen = run(routes)
    assert result.info.engine == "vllm"
    assert (result.info.engine_version, result.info.model_path) == ("0.32.0", "/m/tiny")
    (path, body), = seen
    assert path == "/inference/v1/generate"
    assert body["token_ids"] == PROMPT and body["sampling_params"]["max_tokens"] == 8
    assert body["request_id"].startswith("p-0-1-")
    (gen,) = result.generations
    assert (gen.output_ids, gen.finish_reason, gen.matched_stop) == ([7, 8, 9, 2], "stop", 2)


def test_auto_detects_sglang_first():
    routes = {**SGLANG_INFO, "/generate": (200, {"output_ids": [5, 6], "meta_info": {
        "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": 3, "completion_tokens": 2,
        "cached_tokens": 0}})}
    result, seen = run(routes, params={**PARAMS, "max_new_tokens": 2})
    assert result.info.engine == "sglang" and seen[0][0] == "/generate"


def test_a_server_that_is_neither_engine_stops_the_worker():
    result, _ = run({})
    assert isinstance(result, ConfigError) and "--engine" in str(result)


@pytest.mark.parametrize("status", [403, 404])
def test_missing_token_route_falls_back_to_completions_with_token_ids(status):
    completion = answer(choice([7, 8], prompt_token_ids=PROMPT), completion=2)
    routes = {**VLLM_INFO, "/inference/v1/generate": (status, {"error": {"message": "no"}}),
              "/v1/completions": (200, completion)}
    result, seen = run(routes, params={**PARAMS, "max_new_tokens": 2})
    assert [p for p, _ in seen] == ["/inference/v1/generate", "/v1/completions"]
    body = seen[1][1]
    assert body["prompt"] == PROMPT and body["return_token_ids"] is True and body["model"] == "tiny"
    assert result.generations[0].output_ids == [7, 8]


def test_completions_echoing_other_prompt_ids_is_rejected():
    completion = answer(choice([7, 8], prompt_token_ids=[1, 2, 4]), completion=2)
    routes = {**VLLM_INFO, "/v1/completions": (200, completion)}
    result, _ = run(routes, params={**PARAMS, "max_new_tokens": 2})  # the native route answers 404
    assert isinstance(result, RetryableInferenceError) and "prompt_token_ids" in str(result)


def test_natural_eos_is_recorded_as_the_matched_stop():
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None)
    (gen,) = vllm_generations(answer(choice([7, 2], "stop", None)), call, endpoint="e", latency=0.0)
    assert gen.matched_stop == 2


def test_stop_id_not_last_is_an_integrity_error():
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None)
    with pytest.raises(RetryableInferenceError, match="stop on 2"):
        vllm_generations(answer(choice([2, 7], "stop", 2)), call, endpoint="e", latency=0.0)


def test_a_context_clip_comes_back_capped_with_the_engine_cap():
    """vLLM stops at its context with ``length`` and fewer ids: the worker's --on-capped decides."""
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None)
    gen, = vllm_generations(answer(choice([7, 8, 9], "length")), call, endpoint="e", latency=0.0)
    assert (gen.finish_reason, gen.capped_at, gen.output_ids) == ("length", 3, [7, 8, 9])
    full, = vllm_generations(answer(choice(range(8), "length")), call, endpoint="e", latency=0.0)
    assert full.capped_at is None


def test_the_weight_versions_of_a_choice_are_recorded():
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None)
    spans = [{"version": "v1", "start": 0, "end": 2}, {"version": "v2", "start": 2, "end": 8}]
    gen, = vllm_generations(answer(choice(range(8), weight_versions=spans)), call, endpoint="e", latency=0.0)
    assert gen.weight_version == "v1+v2"


def test_n_choices_are_matched_by_index_and_counted_together():
    params = {**PARAMS, "max_new_tokens": 2, "n": 2}
    call = Call(input_ids=PROMPT, sampling_params=params, n=2, rid="r", vocab_size=None)
    payload = answer(choice([5, 6], index=1), choice([7, 8], index=0))
    gens = vllm_generations(payload, call, endpoint="e", latency=0.0)
    assert [g.output_ids for g in gens] == [[7, 8], [5, 6]]
    with pytest.raises(RetryableInferenceError):
        vllm_generations(answer(choice([7, 8]), choice([5, 6], index=1), completion=5), call,
                         endpoint="e", latency=0.0)


@pytest.mark.parametrize(("payload", "message"), [
    (answer(choice([7, 8]), completion=3), "completion_tokens"),
    (answer(choice([7, 8]), prompt=4), "prompt_tokens"),
    (answer(choice([7, 9999])), "outside the vocabulary"),
    (answer(choice([7, 8], "abort")), "aborted"),
    (answer(choice([7, 8], "weird")), "unexpected finish_reason"),
    ({"choices": []}, "expected 1 choices"),
])
def test_integrity_guards_apply_to_vllm(payload, message):
    call = Call(input_ids=PROMPT, sampling_params={**PARAMS, "max_new_tokens": 2}, n=1, rid="r",
                vocab_size=4096)
    with pytest.raises(RetryableInferenceError, match=message):
        vllm_generations(payload, call, endpoint="e", latency=0.0)


def test_vllm_bad_request_is_dead_lettered_with_its_message():
    error = {"error": {"message": "The decoder prompt (length 2100) is longer than the maximum model length "
                                  "of 2048.", "type": "BadRequestError", "param": None, "code": 400}}
    result, seen = run({**VLLM_INFO, "/inference/v1/generate": (400, error)})
    assert isinstance(result, FatalInferenceError) and "decoder prompt" in str(result)
    assert len(seen) == 1


@pytest.mark.parametrize("status", [500, 503, 429])
def test_vllm_server_errors_are_retried(status):
    error = {"error": {"message": "busy", "type": "ServiceUnavailableError", "code": status}}
    result, seen = run({**VLLM_INFO, "/inference/v1/generate": (status, error)}, max_attempts=2)
    assert isinstance(result, RetryableInferenceError) and len(seen) == 2


def test_forced_vllm_engine_skips_sglang_routes():
    routes = {**VLLM_INFO, **SGLANG_INFO, "/inference/v1/generate": (200, answer(choice([7, 8])))}
    result, _ = run(routes, engine="vllm", params={**PARAMS, "max_new_tokens": 2})
    assert result.info.engine == "vllm"


def test_engine_setting_is_checked_and_reaches_the_config():
    from eaglefeed.cli import generate
    from eaglefeed.core.config import KafkaConfig, WorkerConfig

    with pytest.raises(ConfigError, match="engine"):
        WorkerConfig(kafka=KafkaConfig(), sglang_urls=("http://s",), engine="tgi")
    import argparse

    parser = argparse.ArgumentParser()
    generate.register(parser.add_subparsers())
    args = parser.parse_args(["generate", "--engine", "vllm"])
    assert generate.worker_config(args).engine == "vllm"
    assert generate.worker_config(parser.parse_args(["generate"])).engine == "auto"


def test_an_engine_sends_its_own_request_given_only_the_client_and_the_server():
    """No pool: the engine posts through the client it is given and parses the answer."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), json.loads(request.content)))
        return httpx.Response(200, json=answer(choice([7, 8])))

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            call = Call(input_ids=PROMPT, sampling_params={**PARAMS, "max_new_tokens": 2}, n=1, rid="r",
                        vocab_size=None)
            return await ENGINES_BY_NAME["vllm"].generate(
                client=http, server=Server(url="http://v/"), call=call, started=0.0,
                info=ServerInfo(model_path="/m/tiny", engine_version="0.32.0", engine="vllm"))

    (gen,) = asyncio.run(go())
    assert gen.output_ids == [7, 8] and gen.endpoint == "http://v"
    assert [url for url, _body in seen] == ["http://v/inference/v1/generate"]


def test_the_engines_are_the_names_the_config_offers():
    from eaglefeed.core.config import ENGINE_CHOICES, ENGINE_NAMES

    assert tuple(ENGINES_BY_NAME) == ENGINE_NAMES and ENGINE_CHOICES == ("auto", *ENGINE_NAMES)
    assert all(engine.name == name for name, engine in ENGINES_BY_NAME.items())


def test_the_token_routes_top_level_prompt_echo_is_checked():
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None)
    good = {**answer(choice(range(8))), "prompt_token_ids": PROMPT}
    assert vllm_generations(good, call, endpoint="e", latency=0.0)[0].output_ids == list(range(8))
    with pytest.raises(RetryableInferenceError, match="prompt_token_ids differ"):
        vllm_generations({**good, "prompt_token_ids": [9, *PROMPT]}, call, endpoint="e", latency=0.0)


def test_an_output_that_runs_past_the_tokenizers_eos_is_a_dead_letter():
    """vLLM stops only on the generation config's EOS ids: without the tokenizer's it runs past it."""
    call = Call(input_ids=PROMPT, sampling_params=PARAMS, n=1, rid="r", vocab_size=None, eos_id=2)
    with pytest.raises(FatalInferenceError, match="runs past the tokenizer's end-of-sequence id 2") as caught:
        vllm_generations(answer(choice([5, 2, 7, 8, 9, 10, 11, 12])), call, endpoint="e", latency=0.0)
    assert caught.value.kind == "past_eos"
    gen, = vllm_generations(answer(choice([5, 7, 2], "stop")), call, endpoint="e", latency=0.0)
    assert gen.matched_stop == 2


def test_the_demo_tokenizer_names_its_eos():
    from eaglefeed.consumers.generate.tokens import load_local
    from eaglefeed.devtools.demo import TOKENIZER_DIR

    assert load_local(str(TOKENIZER_DIR), trust_remote_code=False).eos_id == 2
