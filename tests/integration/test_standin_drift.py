"""The stand-in brought to SGLang 0.5.23's behaviour, and what the worker's inference path makes of it.

Each test sends the worker's own requests (``records.sampling_params`` through ``InferenceClient``
and its ``ServerPool``) to an in-process stand-in over real HTTP, and checks the outcome the
worker acts on: a dead letter's kind and message, a Generation's finish and cap, a server's health.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from eaglefeed.consumers.generate.inference import InferenceClient, Samples, ServerPool, check_samples
from eaglefeed.consumers.generate.records import identical_samples, requests_for, sample_seeds
from eaglefeed.core.errors import FatalInferenceError
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin import StandinConfig
from eaglefeed.devtools.standin.vocab import Vocab, load_vocab
from tests.integration.test_standin_contract import FAST, SLOW, ServerThread

CONTEXT = 128


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[..., str]]:
    """Factory: the URL of a stand-in with these config overrides (one per config, module-wide)."""
    vocab: Vocab = load_vocab(TOKENIZER_DIR)
    servers: dict[str, ServerThread] = {}

    def start(**overrides: Any) -> str:
        key = repr(sorted(overrides.items()))
        if key not in servers:
            config = StandinConfig(tokenizer=TOKENIZER_DIR, port=0, **{**FAST, **overrides})
            servers[key] = ServerThread(config, vocab)
        return servers[key].url

    yield start
    for server in servers.values():
        server.close()


def prompt(length: int, max_new_tokens: int, *, pid: str = "p", samples: int = 1) -> dict[str, Any]:
    return {"prompt_id": pid, "input_ids": [300 + i % 500 for i in range(length)], "num_samples": samples,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.7, "top_p": 0.9,
                                "top_k": 20, "min_p": 0.0, "stop_token_ids": [], "seed": 3}}


def generate(url: str, input_ids: list[int], params: dict[str, Any], *, max_attempts: int = 2) -> Samples:
    """One request through the worker's InferenceClient (its pool, engine and integrity checks)."""

    async def go() -> Samples:
        async with httpx.AsyncClient(timeout=30) as http:
            pool = ServerPool(client=http, urls=[url], eject_after=5, probe_interval=0.1)
            client = InferenceClient(pool=pool, http=http, concurrency=4, max_attempts=max_attempts,
                                     backoff=0.001, backoff_max=0.01)
            try:
                return await client.generate(input_ids, params, rid="drift")
            finally:
                await pool.close()

    return asyncio.run(go())


def one(url: str, p: dict[str, Any], **changes: Any) -> Samples:
    (_indexes, params), = requests_for(p, "separate")
    return generate(url, p["input_ids"], {**params, **changes})


def test_an_unknown_sampling_key_is_one_dead_letter_not_retried_server_errors(serve):
    """0.5.23's schema gate: 400 ``{"error": "unknown field ..."}``; it was a 500, retried and ejecting."""
    url = serve()
    with pytest.raises(FatalInferenceError) as caught:
        one(url, prompt(8, 16), seed=1)
    assert caught.value.kind == "http_400" and caught.value.attempts == 1
    assert str(caught.value).startswith("unknown field `seed`, expected one of `max_new_tokens`")
    with pytest.raises(FatalInferenceError, match="invalid type: floating point `0.5`, expected i64"):
        one(url, prompt(8, 16), min_new_tokens=0.5)


def test_a_stop_id_on_the_last_allowed_token_finishes_stop_and_is_no_cap(serve):
    """SGLang checks stop ids before the length: the row is a stop row, not a capped one."""
    url = serve()
    natural, = one(url, prompt(8, 100)).generations
    assert natural.finish_reason == "stop"
    exact, = one(url, prompt(8, len(natural.output_ids))).generations
    assert (exact.finish_reason, exact.matched_stop, exact.capped_at) == ("stop", natural.matched_stop, None)
    assert exact.output_ids == natural.output_ids


def test_the_scheduler_caps_two_below_the_context_and_the_worker_sees_the_cap(serve):
    """prompt + max_new_tokens = context is accepted, then capped to max_req_len - prompt - 1."""
    url = serve(context_length=CONTEXT, length_fraction=1.0)
    gen, = one(url, prompt(100, CONTEXT - 100)).generations
    assert (gen.finish_reason, len(gen.output_ids), gen.capped_at) == ("length", 26, 26)
    full, = one(url, prompt(100, 26)).generations
    assert (full.finish_reason, full.capped_at) == ("length", None)


def test_a_prompt_within_six_tokens_of_the_context_is_refused_with_sglangs_text(serve):
    url = serve(context_length=CONTEXT)
    with pytest.raises(FatalInferenceError) as caught:
        one(url, prompt(CONTEXT - 6, 1))
    assert caught.value.kind == "http_400" and caught.value.attempts == 1
    assert str(caught.value) == ("Input length (122 tokens) exceeds the maximum allowed length (122 tokens). "
                                 "Use a shorter input or enable --allow-auto-truncate.")
    gen, = one(url, prompt(CONTEXT - 7, 1)).generations
    assert len(gen.output_ids) == 1


def test_health_is_a_real_generation_so_a_server_that_cannot_generate_stays_out_of_rotation(serve):
    """/health runs a one-token generation (SGLang 0.5.23): a stuck scheduler answers 503."""
    stuck = serve(prefill_ms_per_token=5000.0, decode_step_ms=5000.0, health_check_timeout=0.3)
    healthy = serve()

    async def probe(url: str) -> tuple[bool, str | None]:
        async with httpx.AsyncClient(timeout=30) as http:
            pool = ServerPool(client=http, urls=[url], eject_after=1, probe_interval=0.05)
            server = await pool.acquire()
            pool.release(server, failed=True)  # out of rotation, probed on /health
            await asyncio.sleep(1.0)
            await pool.close()
            return server.healthy, server.last_error

    assert asyncio.run(probe(healthy)) == (True, None)
    back, error = asyncio.run(probe(stuck))
    assert not back and error == "/health answered HTTP 503"


def test_aborting_the_rid_of_an_n_request_stops_none_of_its_samples(serve):
    """Each sample runs under a regenerated rid: the worker gets all n samples, none aborted."""
    url = serve(**SLOW)
    p = prompt(8, 30, samples=3)
    (_indexes, params), = requests_for(p, "n")
    body = {"input_ids": p["input_ids"], "rid": "job", "sampling_params": {**params, "ignore_eos": True}}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"{url}/generate", json=body, timeout=30)
        time.sleep(0.2)
        assert httpx.post(f"{url}/abort_request", json={"rid": "job"}).status_code == 200
        payload = pending.result().json()
    gens = check_samples(payload, 3, p["input_ids"], body["sampling_params"], vocab_size=None, endpoint=url,
                         latency=0.0)
    assert [(g.finish_reason, len(g.output_ids)) for g in gens] == [("length", 30)] * 3


def n_request(url: str, p: dict[str, Any], *, seeds: bool) -> Samples:
    (indexes, params), = requests_for(p, "n")

    async def go() -> Samples:
        async with httpx.AsyncClient(timeout=30) as http:
            pool = ServerPool(client=http, urls=[url], eject_after=5, probe_interval=0.1)
            client = InferenceClient(pool=pool, http=http, concurrency=8, max_attempts=1, backoff=0.001,
                                     backoff_max=0.01)
            try:
                return await client.generate(p["input_ids"], params, rid="n",
                                             seeds=sample_seeds(p, indexes) if seeds else None)
            finally:
                await pool.close()

    return asyncio.run(go())


def test_samples_mode_n_on_a_deterministic_server_gives_n_distinct_samples_that_a_rerun_repeats(serve):
    """A deterministic SGLang gives all n samples of a request its one seed: the worker seeds each."""
    url = serve(seed_mode="deterministic")
    p = prompt(12, 40, pid="n-mode", samples=4)
    shared = n_request(url, p, seeds=False)  # what one n request gets: n copies of one sample
    assert identical_samples(shared.generations, requests_for(p, "n")[0][1])
    first = n_request(url, p, seeds=True)
    assert first.info.seeded is True
    outputs = [g.output_ids for g in first.generations]
    assert len({tuple(ids) for ids in outputs}) == 4
    assert [g.sampling_seed for g in first.generations] == list(sample_seeds(p, [0, 1, 2, 3]))
    assert [g.output_ids for g in n_request(url, p, seeds=True).generations] == outputs  # a rerun
    separate = [one(url, {**p, "num_samples": 1}, sampling_seed=seed).generations[0].output_ids
                for seed in sample_seeds(p, [0, 1, 2, 3])]
    assert separate == outputs  # the same rows --samples-mode separate writes


def test_a_server_that_ignores_seeds_says_so_and_does_not_repeat(serve):
    url = serve(seed_mode="ignored")
    p = prompt(12, 40, pid="ignored")
    first, second = one(url, p), one(url, p)
    assert first.info.seeded is False
    assert first.generations[0].output_ids != second.generations[0].output_ids
