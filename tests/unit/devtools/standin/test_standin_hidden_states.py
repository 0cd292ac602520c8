"""SGLang 0.5.23's hidden-state contract on /generate, served by the stand-in with labelled values.

The facts behind each expectation, with SGLang file:line, are in docs/journal/sglang-aux-hidden-states.md.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from eaglefeed.devtools.standin import StandinConfig, add_arguments, build_app
from eaglefeed.devtools.standin.cli import config_from_args
from eaglefeed.devtools.standin.hidden_states import EXCEEDS_LAST_MESSAGE, NOT_CONFIGURED_MESSAGE, value

AUX = {"enable_return_aux_hidden_states": True, "speculative_algorithm": "EAGLE3"}
PROMPT = list(range(300, 310))  # 10 tokens


def config(**knobs: Any) -> StandinConfig:
    base = {"latency_model": "none", "think_fraction": 0, "tool_call_fraction": 0, "length_fraction": 0,
            "prefix_cache_block_size": 0}
    return StandinConfig(**{**base, **knobs})


def call(vocab, cfg: StandinConfig, *requests: tuple[str, str, Any]) -> list[tuple[int, Any]]:
    """Send (method, path, body) requests in order to one app; return (status, JSON or SSE events)."""

    async def go() -> list[tuple[int, Any]]:
        client = TestClient(TestServer(build_app(cfg, vocab=vocab)))
        await client.start_server()
        answers = []
        try:
            for method, path, body in requests:
                response = await client.request(method, path, json=body)
                text = await response.text()
                if response.content_type == "text/event-stream":
                    events = [line[len("data: "):] for line in text.split("\n\n") if line]
                    assert events[-1] == "[DONE]"
                    answers.append((response.status, [json.loads(e) for e in events[:-1]]))
                else:
                    answers.append((response.status, json.loads(text) if text else None))
        finally:
            await client.close()
        return answers

    return asyncio.run(go())


def generate(vocab, cfg, body):
    ((status, answer),) = call(vocab, cfg, ("POST", "/generate", body))
    return status, answer


def body(prompt=PROMPT, tokens=5, **extra):
    return {"input_ids": prompt, "return_hidden_states": True,
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}, **extra}


def expected_row(token, position, layers, width=16):
    return [value(token, position, k, d) for k in layers for d in range(width)]


def expected_states(prompt, output, layers, first=0, count=None, width=16):
    """What a test recomputes from the ids alone: [block of prompt rows from `first`, rows of output[:-1]]."""
    count = len(output) if count is None else count
    if count == 0:
        return []
    block = [expected_row(prompt[p], p, layers, width) for p in range(first, len(prompt))]
    rows = [expected_row(output[i], len(prompt) + i, layers, width) for i in range(count - 1)]
    return [block, *rows]


def test_aux_states_cover_prompt_and_output_but_the_last_token_with_labelled_values(vocab):
    status, out = generate(vocab, config(**AUX), body())
    assert status == 200
    meta = out["meta_info"]
    states = meta["hidden_states"]
    assert meta["completion_tokens"] == 5 and len(out["output_ids"]) == 5
    # SGLang's shape: one [prompt_len][3*H] block, then one [3*H] row per decoded token but the last
    assert len(states) == 5
    assert len(states[0]) == 10 and all(len(row) == 3 * 16 for row in states[0])
    assert all(len(row) == 3 * 16 and isinstance(row[0], float) for row in states[1:])
    # default EAGLE3 layers of an 8-layer model: inputs of layers 2, 4, 5 (= vLLM ids), concatenated
    assert states == expected_states(PROMPT, out["output_ids"], [2, 4, 5])
    flat = [v for row in [*states[0], *states[1:]] for v in row]
    assert len(flat) == (10 + 4) * 48
    assert all(v * 64 == int(v * 64) and -127 <= v * 64 <= 127 for v in flat)  # exact in bf16


def test_explicit_layer_ids_are_shifted_by_one_and_concatenated_in_ascending_layer_order(vocab):
    cfg = config(**AUX, return_aux_hidden_state_layer_ids=(6, 0, 3))
    _, out = generate(vocab, cfg, body())
    assert out["meta_info"]["hidden_states"] == expected_states(PROMPT, out["output_ids"], [1, 4, 7])


def test_hidden_size_and_depth_are_knobs(vocab):
    cfg = config(**AUX, num_hidden_layers=32, hidden_size=4)
    _, out = generate(vocab, cfg, body(tokens=3))
    states = out["meta_info"]["hidden_states"]
    assert states == expected_states(PROMPT, out["output_ids"], [2, 16, 29], width=4)
    assert len(states[0][0]) == 12


def test_last_layer_mode_returns_one_layer_labelled_n(vocab):
    _, out = generate(vocab, config(enable_return_hidden_states=True), body())
    assert out["meta_info"]["hidden_states"] == expected_states(PROMPT, out["output_ids"], [8])


def test_not_asking_returns_no_key_and_flags_off_keep_the_old_answer(vocab):
    plain = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    _, with_flags = generate(vocab, config(**AUX), plain)
    _, without = generate(vocab, config(), plain)
    assert "hidden_states" not in with_flags["meta_info"] and "hidden_states" not in without["meta_info"]
    assert with_flags["output_ids"] == without["output_ids"]
    _, asked = generate(vocab, config(**AUX), body())
    assert asked["output_ids"] == without["output_ids"]  # capture changes no token


def test_asking_a_server_without_capture_is_sglangs_400(vocab):
    assert generate(vocab, config(), body()) == (400, {"error": {"message": NOT_CONFIGURED_MESSAGE}})
    assert NOT_CONFIGURED_MESSAGE == (
        "The server is not configured to return hidden states. Please set "
        "`--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
        "or the legacy `--enable-return-hidden-states` flag."
    )
    status, events = generate(vocab, config(), body(stream=True))  # inside a 200 stream when streaming
    assert status == 200 and events == [{"error": {"message": NOT_CONFIGURED_MESSAGE}}]
    assert generate(vocab, config(return_hidden_states_mode="last"), body()) == (
        400, {"error": {"message": EXCEEDS_LAST_MESSAGE}})
    assert generate(vocab, config(), {**body(), "return_hidden_states": False})[0] == 200


def test_the_schema_gate_takes_only_booleans(vocab):
    for raw, text in (("last", 'string "last", expected a value or an array of values for BoolOrList'),
                      (1, "integer `1`, expected a value or an array of values for BoolOrList"),
                      ([True, "x"], 'string "x", expected a boolean')):
        assert generate(vocab, config(**AUX), {**body(), "return_hidden_states": raw}) == (
            400, {"error": f"invalid type: {text}"})


def test_a_batch_asks_per_prompt_and_the_list_must_match_the_batch(vocab):
    other = list(range(500, 507))
    request = body(prompt=[PROMPT, other], return_hidden_states=[False, True])
    status, outs = generate(vocab, config(**AUX), request)
    assert status == 200 and "hidden_states" not in outs[0]["meta_info"]
    assert outs[1]["meta_info"]["hidden_states"] == expected_states(other, outs[1]["output_ids"], [2, 4, 5])
    assert generate(vocab, config(**AUX), body(prompt=[PROMPT, other], return_hidden_states=[True])) == (
        400, {"error": {"message": "The length of return_hidden_states should be equal to the batch size."}})


def test_prefix_cache_hits_drop_the_cached_positions_from_the_block(vocab):
    cfg = config(**AUX, prefix_cache_block_size=4)
    (_, first), (_, second) = call(vocab, cfg, ("POST", "/generate", body()), ("POST", "/generate", body()))
    assert first["meta_info"]["cached_tokens"] == 0 and len(first["meta_info"]["hidden_states"][0]) == 10
    meta = second["meta_info"]
    assert meta["cached_tokens"] == 8
    assert len(meta["hidden_states"][0]) == meta["prompt_tokens"] - meta["cached_tokens"] == 2
    assert meta["hidden_states"] == expected_states(PROMPT, second["output_ids"], [2, 4, 5], first=8)


def test_n_samples_each_get_their_own_rows_after_the_cached_prompt(vocab):
    cfg = config(**AUX, prefix_cache_block_size=4)
    request = body(tokens=6)
    request["sampling_params"] = {**request["sampling_params"], "n": 2, "temperature": 1.0}
    status, outs = generate(vocab, cfg, request)
    assert status == 200 and len(outs) == 2 and outs[0]["output_ids"] != outs[1]["output_ids"]
    for out in outs:  # SGLang prefills the prompt once first, so each sample's prompt hits the cache
        meta = out["meta_info"]
        assert meta["cached_tokens"] == 8
        assert meta["hidden_states"] == expected_states(PROMPT, out["output_ids"], [2, 4, 5], first=8)
    _, outs = generate(vocab, config(**AUX), request)  # no prefix cache: whole prompt blocks
    assert all(len(out["meta_info"]["hidden_states"][0]) == 10 for out in outs)


def test_chunked_prefill_returns_only_the_last_chunks_rows(vocab):
    _, out = generate(vocab, config(**AUX, chunked_prefill_size=4), body())
    assert out["meta_info"]["cached_tokens"] == 0
    assert out["meta_info"]["hidden_states"] == expected_states(PROMPT, out["output_ids"], [2, 4, 5], first=8)
    _, out = generate(vocab, config(**AUX, chunked_prefill_size=10), body())  # one chunk: all
    assert len(out["meta_info"]["hidden_states"][0]) == 10


@pytest.mark.parametrize("incremental", [False, True])
def test_stream_chunks_carry_the_cumulative_states(vocab, incremental):
    cfg = config(**AUX, incremental_streaming_output=incremental)
    status, events = generate(vocab, cfg, body(tokens=4, stream=True))
    assert status == 200 and len(events) == 4
    _, whole = generate(vocab, cfg, body(tokens=4))
    for count, event in enumerate(events, start=1):
        meta = event["meta_info"]
        assert meta["completion_tokens"] == (len(event["output_ids"]) if not incremental else count)
        assert meta["hidden_states"] == expected_states(PROMPT, whole["output_ids"], [2, 4, 5], count=count)


def test_zero_new_tokens_give_an_empty_list(vocab):
    _, out = generate(vocab, config(**AUX), body(tokens=0))
    assert out["output_ids"] == [] and out["meta_info"]["hidden_states"] == []


def test_server_info_reports_sglangs_resolved_flags(vocab):
    cfg = config(**AUX, return_aux_hidden_state_layer_ids=(1, 3, 5))
    ((_, info), (_, off)) = call(vocab, cfg, ("GET", "/server_info", None), ("GET", "/server_info", None))
    assert {key: info[key] for key in (
        "enable_return_hidden_states", "return_hidden_states_mode", "enable_return_aux_hidden_states",
        "aux_hidden_state_capture", "return_aux_hidden_state_layer_ids", "speculative_algorithm",
        "chunked_prefill_size")} == {
        "enable_return_hidden_states": False, "return_hidden_states_mode": "full",
        "enable_return_aux_hidden_states": True, "aux_hidden_state_capture": "eagle3",
        "return_aux_hidden_state_layer_ids": [1, 3, 5], "speculative_algorithm": None,
        "chunked_prefill_size": -1}
    knobs = info["eaglefeed_standin_config"]  # SGLang reports neither: a client reads the model's config.json
    assert (knobs["num_hidden_layers"], knobs["hidden_size"]) == (8, 16)
    ((_, plain),) = call(vocab, config(), ("GET", "/server_info", None))
    assert plain["return_hidden_states_mode"] is None and plain["enable_return_aux_hidden_states"] is False
    assert plain["aux_hidden_state_capture"] is None


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"return_aux_hidden_state_layer_ids": (1,)},
         "--return-aux-hidden-state-layer-ids requires --enable-return-aux-hidden-states."),
        ({"enable_return_aux_hidden_states": True},
         "--enable-return-aux-hidden-states needs --speculative-algorithm EAGLE3, DFLASH or DSPARK to name "
         "the capture convention, got None."),
        ({**AUX, "return_aux_hidden_state_layer_ids": ()}, "must not be empty."),
        ({**AUX, "return_aux_hidden_state_layer_ids": (-1,)}, "must be non-negative, got [-1]."),
        ({**AUX, "return_aux_hidden_state_layer_ids": (1, 1)}, "must not repeat a layer, got [1, 1]."),
        ({**AUX, "return_aux_hidden_state_layer_ids": (8,)},
         "--return-aux-hidden-state-layer-ids [8] out of range for a target with 8 layers."),
        ({**AUX, "return_aux_hidden_state_layer_ids": (1, 7)},
         "The model captured 1 aux hidden states, but --return-aux-hidden-state-layer-ids names 2 layers."),
        ({"speculative_algorithm": "EAGLE3"}, "runs no speculative decoding"),
    ],
)
def test_start_up_refuses_what_sglang_refuses(knobs, message):
    with pytest.raises(ValueError) as info:
        config(**knobs)
    assert message in str(info.value)


def test_flags_reach_the_config():
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
                              "--return-aux-hidden-state-layer-ids", "1", "10", "28",
                              "--num-hidden-layers", "32", "--hidden-size", "4",
                              "--chunked-prefill-size", "64"])
    cfg = config_from_args(args)
    assert cfg.enable_return_aux_hidden_states and cfg.speculative_algorithm == "EAGLE3"
    assert cfg.return_aux_hidden_state_layer_ids == (1, 10, 28)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.chunked_prefill_size) == (32, 4, 64)
