"""A sample the engine cut below max_new_tokens: --on-capped dead-letter (default) or keep, on the row."""

import json

import httpx
import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.schemas import DEAD_LETTER, GENERATION
from tests.unit.consumers.generate.loop_support import (
    DEAD_LETTERS,
    GENERATIONS,
    Server,
    WorkerRun,
    kafka_with_prompts,
)


class CappingServer(Server):
    """SGLang whose scheduler lowered max_new_tokens (8) to 5: ``length`` with ``length: 5``."""

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/model_info", "/server_info"):
            info = {"/model_info": {"model_path": "demo/model", "weight_version": "w-7"},
                    "/server_info": {"version": "0.5.23", "enable_deterministic_inference": True}}
            return httpx.Response(200, json=info[request.url.path])
        body = json.loads(request.content)
        ids = body["input_ids"]
        return httpx.Response(200, json={"text": "x", "output_ids": [7, 8, 9, 10, 11], "meta_info": {
            "id": body["rid"], "finish_reason": {"type": "length", "length": 5}, "prompt_tokens": len(ids),
            "completion_tokens": 5, "cached_tokens": 0, "weight_version": "w-8"}})


def test_a_capped_sample_is_dead_lettered_by_default_naming_the_cap():
    fake = kafka_with_prompts(2, partitions=1)
    run = WorkerRun(fake, CappingServer(), exit_when_idle=0.2)
    assert run.join() == 2
    assert fake.read(GENERATIONS) == []
    letters = [DEAD_LETTER.decode(r.value) for r in fake.read(DEAD_LETTERS)]
    assert [d["error_kind"] for d in letters] == ["capped", "capped"]
    assert "after 5 of max_new_tokens=8" in letters[0]["message"]
    assert run.metric("eaglefeed_worker_capped_samples_total", outcome="dead_letter") == 2


@pytest.mark.parametrize("mode", ["keep"])
def test_with_keep_the_row_records_the_cap_and_the_response_weight_version(mode):
    fake = kafka_with_prompts(2, partitions=1)
    run = WorkerRun(fake, CappingServer(), exit_when_idle=0.2, on_capped=mode)
    assert run.join() == 2
    rows = [GENERATION.decode(r.value) for r in fake.read(GENERATIONS)]
    cuts = [(r["finish_reason"], r["capped_at"], len(r["output_ids"])) for r in rows]
    assert cuts == [("length", 5, 5)] * 2
    assert {r["weight_version"] for r in rows} == {"w-8"} and {r["seeded"] for r in rows} == {True}
    assert fake.read(DEAD_LETTERS) == []
    assert run.metric("eaglefeed_worker_capped_samples_total", outcome="kept") == 2


def test_a_sample_that_ran_to_max_new_tokens_is_not_capped():
    fake = kafka_with_prompts(1, partitions=1)
    run = WorkerRun(fake, Server(), exit_when_idle=0.2)
    assert run.join() == 1
    row, = (GENERATION.decode(r.value) for r in fake.read(GENERATIONS))
    assert row["capped_at"] is None and row["seeded"] is None and row["weight_version"] is None


class PreferringServer(Server):
    """SGLang started with --preferred-sampling-params that no eaglefeed request overrides."""

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model",
                                             "preferred_sampling_params": {"logit_bias": {"7": 5.0}}})
        return await super()._handle(request)


def test_a_server_preferring_sampling_no_request_overrides_stops_the_worker_before_any_row():
    fake = kafka_with_prompts(2, partitions=1)
    server = PreferringServer()
    run = WorkerRun(fake, server, exit_when_idle=0.2)
    with pytest.raises(ConfigError) as caught:
        run.join()
    assert "logit_bias" in str(caught.value) and "\n" not in str(caught.value)
    assert server.requests == [] and fake.read(GENERATIONS) == [] and fake.read(DEAD_LETTERS) == []
