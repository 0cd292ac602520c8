import asyncio
import json

import pytest

from eaglefeed.chat.seeds import base_seed, sample_seed
from eaglefeed.consumers.generate.inference import Generation, ServerInfo
from eaglefeed.consumers.generate.inference.neutral import SENT_KEYS
from eaglefeed.consumers.generate.records import generation_record, invalid_reason, requests_for
from eaglefeed.consumers.generate.tokens import VocabSizes
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer.remote_code import RemoteCodeError
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import GENERATION


def prompt(samples=3, **sp):
    params = {"max_new_tokens": 64, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
              "stop_token_ids": [2], "seed": 100, **sp}
    return {"prompt_id": "p1", "source": "s", "source_row": "7", "turn_index": 1, "input_ids": [5, 6, 7],
            "num_samples": samples, "sampling_params": params, "chat_template_kwargs": "{}",
            "tokenizer_id": "tok", "tokenizer_hash": "th", "chat_template_hash": "ch", "created_at": 1}


def test_separate_mode_sends_one_request_per_sample_with_its_own_seed():
    reqs = requests_for(prompt(), "separate")
    assert [idx for idx, _p in reqs] == [[0], [1], [2]]
    assert [p["sampling_seed"] for _i, p in reqs] == [sample_seed("p1", 100, i) for i in range(3)]
    assert all(p["n"] == 1 and p["stop_token_ids"] == [2] and p["max_new_tokens"] == 64 for _i, p in reqs)


def test_n_mode_sends_one_request_for_all_samples():
    (indexes, params), = requests_for(prompt(), "n")
    assert indexes == [0, 1, 2] and params["n"] == 3 and params["sampling_seed"] == sample_seed("p1", 100, 0)
    (indexes, params), = requests_for(prompt(samples=1), "n")
    assert indexes == [0] and params["n"] == 1


def test_only_the_samples_asked_for_are_requested_each_with_its_own_seed():
    """A prompt published again with more samples asks for the new ones (issue 36)."""
    reqs = requests_for(prompt(), "separate", [1, 2])
    assert [idx for idx, _p in reqs] == [[1], [2]]
    assert [p["sampling_seed"] for _i, p in reqs] == [sample_seed("p1", 100, i) for i in (1, 2)]
    (indexes, params), = requests_for(prompt(), "n", [1, 2])
    assert indexes == [1, 2] and params["n"] == 2 and params["sampling_seed"] == sample_seed("p1", 100, 1)
    (indexes, params), = requests_for(prompt(), "n", [2])
    assert indexes == [2] and params["n"] == 1


def test_every_request_sends_neutral_penalties_and_the_keys_a_server_could_prefer():
    """SGLang merges --preferred-sampling-params under the request: only keys we send are ours."""
    for _indexes, params in requests_for(prompt(stop_token_ids=[]), "separate"):
        penalties = (params["frequency_penalty"], params["presence_penalty"], params["repetition_penalty"])
        assert penalties == (0, 0, 1)
        assert (params["min_new_tokens"], params["ignore_eos"], params["stop_token_ids"]) == (0, False, [])
        assert set(params) == SENT_KEYS


def test_generation_record_keeps_the_exact_ids_and_the_params_sent():
    p = prompt()
    _idx, params = requests_for(p, "separate")[1]
    gen = Generation(output_ids=[9, 2], finish_reason="stop", matched_stop=2, prompt_tokens=3,
                     completion_tokens=2, cached_tokens=0, latency_seconds=0.1, endpoint="http://s")
    rec = generation_record(p, 1, gen, ServerInfo(model_path="m", engine_version="v"), params, "w")
    assert rec["id"] == "p1:1" and rec["prompt_ids"] == [5, 6, 7] and rec["output_ids"] == [9, 2]
    assert json.loads(rec["sampling_params"])["sampling_seed"] == sample_seed("p1", 100, 1)
    assert (rec["model_path"], rec["engine_version"], rec["worker_id"]) == ("m", "v", "w")
    assert rec["engine"] == "sglang"
    info = ServerInfo(model_path="m", engine_version="v", engine="vllm")
    rec = generation_record(p, 1, gen, info, params, "w")
    assert GENERATION.decode(GENERATION.encode(rec))["engine"] == "vllm"


@pytest.mark.parametrize("change, reason", [
    ({"input_ids": []}, "empty"), ({"num_samples": 0}, "num_samples"),
    ({"sampling_params": {**prompt()["sampling_params"], "max_new_tokens": 0}}, "max_new_tokens")])
def test_invalid_prompts_are_named(change, reason):
    assert invalid_reason(prompt()) is None
    assert reason in invalid_reason({**prompt(), **change})


def test_vocab_size_from_the_records_tokenizer_a_fixed_size_or_off():
    async def go():
        assert await VocabSizes(fixed=None, from_tokenizer=True).size_for(str(TOKENIZER_DIR)) == 4096
        assert await VocabSizes(fixed=100, from_tokenizer=True).size_for("anything") == 100
        assert await VocabSizes(fixed=None, from_tokenizer=False).size_for("anything") is None
        with pytest.raises(ConfigError) as err:  # a configuration problem, never a dead letter
            await VocabSizes(fixed=None, from_tokenizer=True).size_for("/nonexistent/tokenizer")
        assert "/nonexistent/tokenizer" in str(err.value) and "--vocab-size" not in str(err.value)

    asyncio.run(go())


def test_a_remote_code_tokenizer_is_sized_only_with_trust_remote_code(remote_tokenizer):
    async def go():
        assert await VocabSizes(fixed=None, from_tokenizer=True,
                                trust_remote_code=True).size_for(str(remote_tokenizer)) == 311
        with pytest.raises(RemoteCodeError) as err:  # stops the worker; nothing dead-lettered
            await VocabSizes(fixed=None, from_tokenizer=True).size_for(str(remote_tokenizer))
        message = str(err.value)
        assert "\n" not in message and "pass --trust-remote-code" in message and "--vocab-size" not in message

    asyncio.run(go())


def test_seeds_follow_the_prompt_id_so_prompts_differ_and_a_rerun_repeats():
    """One base seed for every row no longer gives every prompt's sample 0 the same random stream."""
    seeds = {sample_seed(f"p{i}", 0, 0) for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert sample_seed("p1", 7, 2) == sample_seed("p1", 7, 2) != sample_seed("p1", 7, 3)
    for base in (0, 7, 2**63 - 1 - 2**31):
        assert base_seed("p1", sample_seed("p1", base, 5), 5) == base


def test_a_sample_sent_with_its_own_seed_in_a_batch_records_that_seed():
    p = prompt()
    (indexes, params), = requests_for(p, "n")
    gen = Generation(output_ids=[9, 2], finish_reason="stop", matched_stop=2, prompt_tokens=3,
                     completion_tokens=2, cached_tokens=0, latency_seconds=0.1, endpoint="http://s",
                     sampling_seed=sample_seed("p1", 100, 2))
    rec = generation_record(p, 2, gen, ServerInfo(model_path="m", engine_version="v"), params, "w")
    sent = json.loads(rec["sampling_params"])
    assert (sent["n"], sent["sampling_seed"]) == (1, sample_seed("p1", 100, 2))
