"""The demo's parallel-call conversation completes, turn by turn as the demo runs it.

The stand-in decides at random, per turn, whether a tool-bearing prompt gets calls (50 %) and
whether a call turn makes one call or two (30 %), independently of what the source row's cached
results expect; a source turn of two parallel calls completes only where it draws two. The
sample row ``oai-tools-095`` draws none, so its lane ends ``tool_result_without_call`` (2 cached
results, no call). ``oai-tools-parallel-001`` draws two, then answers both results and the
follow-up in text: this test replays the demo's settings (stand-in defaults, the demo's
sampling, lane 0's seed) through the library and the stand-in's output model. The draws follow
the demo's sampling and seeds: when those change, this test fails, and the row's tickers are
chosen again (any pair whose replay draws two calls, then text).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.cli.demo_job import _demo_prompts
from eaglefeed.core.config import SamplingDefaults
from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.standin.output import OutputModel, plan_completion
from eaglefeed.devtools.standin.sampling import parse_sampling_params
from eaglefeed.devtools.standin.vocab import load_vocab


def _replay(row: dict[str, Any]) -> tuple[Ended, list[int]]:
    renderer, vocab, cfg = PromptRenderer(str(TOKENIZER_DIR)), load_vocab(TOKENIZER_DIR), StandinConfig()
    model = OutputModel(output_len_mean=cfg.output_len_mean, output_len_sigma=cfg.output_len_sigma,
                        think_fraction=cfg.think_fraction, tool_call_fraction=cfg.tool_call_fraction,
                        parallel_tool_call_fraction=cfg.parallel_tool_call_fraction,
                        length_fraction=cfg.length_fraction, random_seed=cfg.random_seed)
    sampling: SamplingDefaults = _demo_prompts(history="rerender").sampling
    sent = {**sampling.as_params(), "sampling_seed": sampling.seed}  # lane 0: the base seed
    sent.pop("seed")
    sent.pop("stop_token_ids")
    step = start(parse_row(row, default_id="0"), mode="rerender", max_turns=16, lane=0, renderer=renderer,
                 conversation_id="demo")
    calls = []
    while isinstance(step, NextPrompt):
        params = parse_sampling_params(dict(sent), vocab_size=vocab.vocab_size)
        limit = min(sampling.max_new_tokens, cfg.context_length - len(step.input_ids))
        done = plan_completion(vocab=vocab, model=model, input_ids=step.input_ids, params=params,
                               max_new_tokens=limit)
        calls.append(done.output_ids.count(vocab.tool_call_start))
        step = continue_after(step.state, prompt_ids=step.input_ids, output_ids=done.output_ids,
                              finish_reason=done.finish_reason["type"], renderer=renderer)
    return step, calls


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, SAMPLE_PROMPTS.read_text(encoding="utf-8").splitlines())}


def test_the_demos_parallel_call_conversation_completes(rows):
    ended, calls = _replay(rows["oai-tools-parallel-001"])
    assert (ended.outcome, ended.reason, calls) == ("complete", "user_turns_done", [2, 0, 0])


def test_a_parallel_source_turn_the_standin_answers_otherwise_ends_its_lane(rows):
    ended, calls = _replay(rows["oai-tools-095"])
    assert (ended.reason, calls) == ("tool_result_without_call", [0])
