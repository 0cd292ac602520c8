"""Measure the converse stage's cost per turn against the producer's cost per single-turn prompt.

The multi-turn rows and the stand-in's outputs of ``bench/conversation_step.py`` (tools,
reasoning, tool calls, ~200-token turns) are run once; every turn that has a next turn becomes
an encoded GenerationRecord carrying its conversation state, as a worker publishes it. Then,
best of ``--repeats`` interleaved passes:

* **stage**: what ``eaglefeed converse`` does per record, outside Kafka: decode the record,
  ``continue_after`` (split, parse, pair, render or take the token suffix), encode the next
  PromptRecord and its ConversationEvent (``eaglefeed.consumers.converse.step.Stepper``);
* **single-turn baseline**: what ``eaglefeed produce`` does per prompt for the same prompts given
  as single-turn rows (``--history original``): parse the row, render with the chat template,
  tokenize, encode (``eaglefeed.producers.build.PromptBuilder``, the exact path).

The ratio is the extra CPU a regenerated turn costs over publishing that prompt from a file.
``--kafka`` also runs conversations end to end on a local broker and the stand-in and reports
the pipeline delay per turn: from the worker's timestamp on a generation to the converse
stage's timestamp on the next prompt (poll, continue, acknowledged send).

    python -m bench.converse_stage --conversations 100
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from prometheus_client import CollectorRegistry

from bench.conversation_step import WEATHER, record_turns
from eaglefeed.chat.conversation import NextPrompt, continue_after
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.consumers.converse.renderers import Renderers
from eaglefeed.consumers.converse.step import Stepper
from eaglefeed.core.config import PromptSettings
from eaglefeed.core.metrics import ConverseMetrics
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.sources import SourceRow
from eaglefeed.schemas import GENERATION


class _Rec:
    topic, partition, offset, key, value = "gen", 0, 0, None, None


def generation_messages(renderer: PromptRenderer, steps: list[tuple[Any, ...]]) -> list[bytes]:
    """The encoded GenerationRecords of the turns that have a next turn (what converse reads)."""
    sampling = json.dumps({"max_new_tokens": 4096, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                           "min_p": 0.0, "sampling_seed": 0})
    out = []
    for i, (state, prompt, output, finish) in enumerate(steps):
        out.append(GENERATION.encode({
            "id": f"{state.conversation_id}-{state.mode}-{state.turn_index}:0", "prompt_id": "p",
            "sample_index": 0, "prompt_ids": prompt, "output_ids": output, "finish_reason": finish,
            "matched_stop": None, "prompt_tokens": len(prompt), "completion_tokens": len(output),
            "cached_tokens": 0, "latency_seconds": 0.0, "endpoint": "e", "model_path": "m", "engine_version": "v",
            "engine": "sglang", "worker_id": "w", "source": "bench", "source_row": str(i),
            "turn_index": state.turn_index, "sampling_params": sampling, "chat_template_kwargs": "{}",
            "tokenizer_id": renderer.tokenizer_id, "tokenizer_hash": renderer.tokenizer_hash,
            "chat_template_hash": "c", "prompt_created_at": 0, "created_at": 0,
            "conversation": state.to_json()}))
    return out


def make_stepper(warm_up: bytes) -> Stepper:
    """The converse stage's step, its renderer loaded (a stage loads it once)."""
    stepper = Stepper(renderers=Renderers(), metrics=ConverseMetrics.create(CollectorRegistry()),
                      tool_format="hermes", max_prompt_tokens=1 << 30)
    stepper.generation(GENERATION.decode(warm_up), _Rec())
    return stepper


def time_stage(stepper: Stepper, messages: list[bytes]) -> float:
    """Mean seconds per record of the converse stage's step (decode, continue, encode outputs)."""
    stepper._seen.clear()  # noqa: SLF001 - a pass replays the same records: let each be new
    t0 = time.perf_counter()
    for value in messages:
        outputs = stepper.generation(GENERATION.decode(value), _Rec())
        assert len(outputs) == 2, outputs  # the next prompt and its turn event
    return (time.perf_counter() - t0) / max(1, len(messages))


def time_single_turn(builder: PromptBuilder, rows: list[SourceRow]) -> float:
    """Mean seconds per prompt of the producer's build (parse, render, tokenize, encode)."""
    t0 = time.perf_counter()
    result = builder.build(rows)
    assert len(result.prompts) == len(rows) and not result.rejected, result.rejected[:1]
    return (time.perf_counter() - t0) / max(1, len(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--output-len-mean", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kafka", action="store_true", help="also measure the pipeline delay per turn")
    args = parser.parse_args()
    renderer = PromptRenderer(str(TOKENIZER_DIR), fast=False)
    steps = record_turns(renderer, args.conversations, args.output_len_mean)
    steps = [s for s in steps
             if isinstance(continue_after(s[0], prompt_ids=s[1], output_ids=s[2], finish_reason=s[3],
                                          renderer=renderer), NextPrompt)]
    figures: dict[str, float] = {}
    builder = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR)), fast=False)
    # The next prompts as single-turn rows (the rerender histories are their messages): what a
    # run would publish from a file of already-regenerated conversations.
    nexts = [continue_after(s[0], prompt_ids=s[1], output_ids=s[2], finish_reason=s[3], renderer=renderer)
             for s in steps if s[0].mode == "rerender"]
    rows = [SourceRow(source="bench", line=i + 1,
                      raw=json.dumps({"messages": n.state.history, "tools": [WEATHER]}).encode())
            for i, n in enumerate(nexts) if isinstance(n, NextPrompt)]
    for mode in ("rerender", "tokens"):
        messages = generation_messages(renderer, [s for s in steps if s[0].mode == mode])
        stepper = make_stepper(messages[0])
        best_stage = best_single = float("inf")
        for _ in range(args.repeats):  # interleaved, best of each: the machine is shared
            best_single = min(best_single, time_single_turn(builder, rows))
            best_stage = min(best_stage, time_stage(stepper, messages))
        ratio = best_stage / best_single
        print(f"{mode:8s}: converse step {best_stage * 1e6:7.0f} us/turn; single-turn produce "
              f"{best_single * 1e6:7.0f} us/prompt; ratio {ratio:4.2f} ({len(messages)} turns)")
        figures[f"converse_{mode}_us_per_turn"] = best_stage * 1e6
        figures[f"converse_{mode}_single_turn_us"] = best_single * 1e6
        figures[f"converse_{mode}_ratio"] = ratio
    if args.kafka:
        from bench.converse_pipeline import pipeline_delay

        figures.update(pipeline_delay(conversations=min(args.conversations, 30)))
    print(f"(load average {os.getloadavg()[0]:.2f})")
    print("RESULT " + json.dumps(figures))


if __name__ == "__main__":
    main()
