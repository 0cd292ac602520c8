"""On a real vLLM: server-side sampling defaults cannot change a row, caps come back capped, seeds.

One server, started with generation-config overrides (as a model's ``generation_config.json``
would set them): ``/v1/completions`` applies them to every key a request leaves out
(``ModelConfig.get_diff_sampling_param``). The worker's own engine sends the requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from eaglefeed.consumers.generate.inference import NEUTRAL, Generation, Server, ServerInfo
from eaglefeed.consumers.generate.inference.engines import Call, VllmEngine
from eaglefeed.consumers.generate.records import requests_for
from tests.engine.conftest import MAX_MODEL_LEN, SERVED_MODEL, Reference, VllmServer

pytestmark = pytest.mark.engine

OVERRIDES = {"repetition_penalty": 1.9, "presence_penalty": 1.5, "frequency_penalty": 1.5}
PROMPT = [1, 10, 20, 30, 2, 1, 40]


@pytest.fixture(scope="module")
def penalised(vllm_factory: Callable[..., VllmServer]) -> VllmServer:
    """vLLM whose generation config prefers strong penalties (both routes on)."""
    return vllm_factory(flags=("--enable-scale-out", "--override-generation-config", json.dumps(OVERRIDES)))


def prompt(input_ids: list[int], max_new_tokens: int, *, temperature: float = 0.0, samples: int = 1,
           seed: int = 0) -> dict[str, Any]:
    return {"prompt_id": "engine", "input_ids": input_ids, "num_samples": samples,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": 1.0,
                                "top_k": -1, "min_p": 0.0, "stop_token_ids": [], "seed": seed}}


def send(server: VllmServer, input_ids: list[int], params: dict[str, Any], *,
         native: bool) -> list[Generation]:
    """One request through the worker's VllmEngine, on the token route or on /v1/completions."""

    async def go() -> list[Generation]:
        target = Server(url=server.url)
        target.native_route = native
        info = ServerInfo(model_path="m", engine_version="v", engine="vllm", served_model=SERVED_MODEL)
        call = Call(input_ids=input_ids, sampling_params=params, n=int(params.get("n", 1)),
                    rid=f"r{time.monotonic_ns()}", vocab_size=None)
        async with httpx.AsyncClient(timeout=120) as http:
            return await VllmEngine().generate(client=http, server=target, info=info, call=call,
                                               started=time.perf_counter())

    return asyncio.run(go())


def test_completions_keep_the_rows_sampling_despite_the_generation_config(
        penalised: VllmServer, greedy_reference: Reference) -> None:
    """With the neutral penalties sent, greedy ids equal transformers' plain greedy decoding."""
    (_indexes, params), = requests_for(prompt(PROMPT, 32), "separate")
    [gen] = send(penalised, PROMPT, params, native=False)
    request = {"id": "g", "input_ids": PROMPT, "max_new_tokens": 32, "stop_token_ids": []}
    expected = greedy_reference([request])
    assert gen.output_ids == expected["g"]
    # what a request without them gets: the server's penalties, which the row would not record
    bare = {k: v for k, v in params.items() if k not in NEUTRAL or k in ("n", "stop_token_ids")}
    [penalised_gen] = send(penalised, PROMPT, bare, native=False)
    assert penalised_gen.output_ids != expected["g"]


def test_a_context_cut_comes_back_capped_through_the_worker_engine(penalised: VllmServer) -> None:
    (_indexes, params), = requests_for(prompt([10] * (MAX_MODEL_LEN - 8), 100), "separate")
    [gen] = send(penalised, [10] * (MAX_MODEL_LEN - 8), params, native=True)
    assert (gen.finish_reason, len(gen.output_ids), gen.capped_at) == ("length", 8, 8)
    assert gen.weight_version == "default"


def test_n_samples_are_seeded_seed_plus_index(penalised: VllmServer) -> None:
    """vLLM seeds sample i of an n request with seed + i: the same ids as separate requests."""
    p = prompt(PROMPT, 8, temperature=1.0, samples=3, seed=11)
    (_indexes, params), = requests_for(p, "n")
    together = [g.output_ids for g in send(penalised, PROMPT, params, native=True)]
    alone = [send(penalised, PROMPT, {**params, "n": 1, "sampling_seed": params["sampling_seed"] + i},
                  native=True)[0].output_ids for i in range(3)]
    assert len({tuple(ids) for ids in together}) == 3
    assert alone == together
