"""What a server would apply besides what a request sends: its preferred sampling params."""

import asyncio
import json

import httpx
import pytest

from eaglefeed.consumers.generate.inference import InferenceClient, ServerPool, vllm_sampling_params
from eaglefeed.consumers.generate.inference.neutral import SENT_KEYS, override_problem
from eaglefeed.consumers.generate.records import requests_for
from eaglefeed.core.errors import ConfigError

PARAMS = {"max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "n": 1}


def sglang(preferred, *, deterministic=False, weight_version="default"):
    """An SGLang 0.5.23 answering /model_info and /server_info."""
    model = {"model_path": "m", "preferred_sampling_params": preferred, "weight_version": weight_version}
    server = {"version": "0.5.23", "enable_deterministic_inference": deterministic}

    def handle(request: httpx.Request) -> httpx.Response:
        routes = {"/model_info": model, "/server_info": server}
        path = request.url.path
        return httpx.Response(200, json=routes[path]) if path in routes else httpx.Response(404, json={})

    return handle


def read_info(handler):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=["http://s"], eject_after=3, probe_interval=1.0)
            return await pool.info(pool.servers[0])

    return asyncio.run(go())


OVERRIDDEN = {"repetition_penalty": 1.3, "temperature": 0.2, "min_new_tokens": 4, "ignore_eos": True,
              "n": 2, "stop_token_ids": [7], "spaces_between_special_tokens": False}


@pytest.mark.parametrize("preferred", [None, {}, OVERRIDDEN])
def test_preferences_every_request_overrides_are_accepted(preferred):
    info = read_info(sglang(preferred))
    assert info.preferred_sampling_params == preferred and info.deterministic is False
    assert info.weight_version == "default"


@pytest.mark.parametrize("preferred, named", [({"logit_bias": {"5": 10.0}}, "logit_bias"),
                                              ({"json_schema": "{}", "temperature": 0.1}, "json_schema"),
                                              ({"stop": ["\n\n"]}, "stop")])
def test_a_preference_no_request_overrides_stops_the_worker_in_one_line(preferred, named):
    with pytest.raises(ConfigError) as caught:
        read_info(sglang(preferred))
    text = str(caught.value)
    assert "\n" not in text and named in text and "http://s" in text and "temperature" not in text


def test_the_keys_sent_cover_every_numeric_setting_a_server_can_prefer():
    """SGLang's SamplingParams fields that change ids, and vLLM's generation-config defaults."""
    sglang_fields = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
                     "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "ignore_eos",
                     "stop_token_ids", "sampling_seed"}
    assert sglang_fields <= SENT_KEYS
    assert override_problem({k: 1 for k in sglang_fields}) is None


def test_vllm_gets_the_neutral_penalties_under_its_own_names():
    prompt = {"prompt_id": "p", "input_ids": [1], "num_samples": 1,
              "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                                  "min_p": 0.0, "stop_token_ids": [], "seed": 0}}
    (_indexes, params), = requests_for(prompt, "separate")
    sent = vllm_sampling_params(params)
    assert {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "min_tokens": 0, "ignore_eos": False}.items() <= sent.items()


def test_a_response_from_other_weights_makes_the_worker_read_the_server_info_again():
    """After an in-place weight update SGLang answers with another weight_version (and model path)."""
    state = {"version": "v1", "reads": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            state["reads"] += 1
            return httpx.Response(200, json={"model_path": f"m-{state['version']}",
                                             "weight_version": state["version"]})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.23"})
        body = json.loads(request.content)
        return httpx.Response(200, json={"output_ids": [7, 2], "meta_info": {
            "id": body["rid"], "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 3,
            "completion_tokens": 2, "cached_tokens": 0, "weight_version": state["version"]}})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as http:
            pool = ServerPool(client=http, urls=["http://s"], eject_after=3, probe_interval=1.0)
            client = InferenceClient(pool=pool, http=http, concurrency=2, max_attempts=1, backoff=0.0,
                                     backoff_max=0.0)
            first = await client.generate([1, 2, 3], PARAMS, rid="a")
            state["version"] = "v2"  # the weights change between two requests
            second = await client.generate([1, 2, 3], PARAMS, rid="b")
            third = await client.generate([1, 2, 3], PARAMS, rid="c")
            return first, second, third

    first, second, third = asyncio.run(go())
    assert (first.info.model_path, first.generations[0].weight_version) == ("m-v1", "v1")
    assert second.generations[0].weight_version == "v2"  # the row says which weights made it
    assert third.info.model_path == "m-v2" and third.info.weight_version == "v2" and state["reads"] == 2
