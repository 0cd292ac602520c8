"""Measure the library cost of one conversation step against a plain render of the same prompt.

For ``--conversations`` multi-turn rows (tools, reasoning, tool calls; the stand-in's output model
writes each turn, so output lengths and think blocks look like a run's), every later turn's
prompt is built twice and timed:

* ``continue_after`` in ``rerender`` mode and in ``tokens`` mode (split the output by token id,
  parse calls, pair results, render or take the token suffix), and
* a plain single-turn render of the same prompt: ``PromptRenderer.render`` of the same messages,
  which is what the producer pays for a prompt it renders once.

It prints the mean microseconds per step and the ratios (best of ``--repeats`` passes). This is
the library-level figure; the pipeline-level one (a Kafka round trip per turn) is in the stage's
benchmark.

    python -m bench.conversation_step --conversations 200
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from eaglefeed.chat.conversation import NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin.output import OutputModel, plan_completion
from eaglefeed.devtools.standin.sampling import parse_sampling_params
from eaglefeed.devtools.standin.vocab import load_vocab

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather.",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}


def row(i: int) -> dict[str, Any]:
    """A 4-turn conversation: call, answer, call, answer; its texts vary with ``i``."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": f"City {i}"}}}
    return {"tools": [WEATHER], "messages": [
        {"role": "system", "content": f"You are assistant number {i}. Answer briefly and use tools."},
        {"role": "user", "content": f"What is the weather in city {i} today, and should I go out?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "get_weather", "content": f"rain, {i % 30} C, wind 20 km/h"},
        {"role": "assistant", "content": "It rains."},
        {"role": "user", "content": "What about tomorrow morning, before nine?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "get_weather", "content": "sunny, 18 C"},
        {"role": "assistant", "content": "Sunny."}]}


def record_turns(renderer: PromptRenderer, conversations: int, mean_len: float) -> list[tuple[Any, ...]]:
    """Run each conversation once in both modes; keep (state, prompt, output, finish) per step."""
    vocab = load_vocab(TOKENIZER_DIR)
    model = OutputModel(output_len_mean=mean_len, output_len_sigma=0.5, think_fraction=1.0,
                        tool_call_fraction=1.0, length_fraction=0.0, parallel_tool_call_fraction=0.0)
    params = parse_sampling_params(None, vocab_size=vocab.vocab_size)
    steps = []
    for mode in ("rerender", "tokens"):
        for i in range(conversations):
            step = start(parse_row(row(i), default_id=str(i)), mode=mode, max_turns=16, lane=0,
                         renderer=renderer, conversation_id=str(i))
            while isinstance(step, NextPrompt):
                done = plan_completion(vocab=vocab, model=model, input_ids=step.input_ids, params=params,
                                       max_new_tokens=4096)
                steps.append((step.state, step.input_ids, done.output_ids, done.finish_reason["type"]))
                step = continue_after(step.state, prompt_ids=step.input_ids, output_ids=done.output_ids,
                                      finish_reason=done.finish_reason["type"], renderer=renderer)
    return steps


def time_continue(renderer: PromptRenderer, steps: list[tuple[Any, ...]], mode: str) -> tuple[float, list[Any]]:
    """Mean seconds of ``continue_after`` over the recorded steps of ``mode``, and its results."""
    chosen = [s for s in steps if s[0].mode == mode]
    t0 = time.perf_counter()
    results = [continue_after(state, prompt_ids=prompt, output_ids=output, finish_reason=finish,
                              renderer=renderer) for state, prompt, output, finish in chosen]
    return (time.perf_counter() - t0) / max(1, len(chosen)), results


def time_render(renderer: PromptRenderer, histories: list[list[dict[str, Any]]]) -> float:
    """Mean seconds of one plain render (as the producer renders a single-turn prompt)."""
    t0 = time.perf_counter()
    for history in histories:
        renderer.render(history, tools=[WEATHER], template_kwargs={})
    return (time.perf_counter() - t0) / max(1, len(histories))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--output-len-mean", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    renderer = PromptRenderer(str(TOKENIZER_DIR))
    steps = record_turns(renderer, args.conversations, args.output_len_mean)
    # Only steps that build a next prompt (a lane's last step builds none and costs little).
    kept = []
    for mode in ("rerender", "tokens"):
        _, results = time_continue(renderer, steps, mode)
        chosen = [s for s in steps if s[0].mode == mode]
        kept += [s for s, r in zip(chosen, results, strict=True) if isinstance(r, NextPrompt)]
    steps = kept
    _, results = time_continue(renderer, steps, "rerender")
    # The prompts those steps build, as messages (the rerender histories; tokens mode keeps none).
    histories = [r.state.history for r in results]
    best: dict[str, float] = {"render": float("inf"), "rerender": float("inf"), "tokens": float("inf")}
    for _ in range(args.repeats):  # interleaved, best of each: the machine is shared
        best["render"] = min(best["render"], time_render(renderer, histories))
        for mode in ("rerender", "tokens"):
            best[mode] = min(best[mode], time_continue(renderer, steps, mode)[0])
    print(f"plain render of the next prompt: {best['render'] * 1e6:8.0f} us")
    figures: dict[str, float] = {"conversation_plain_render_us": best["render"] * 1e6}
    for mode in ("rerender", "tokens"):
        ratio = best[mode] / best["render"]
        print(f"{mode:8s} continue_after:     {best[mode] * 1e6:8.0f} us/step, ratio {ratio:5.2f}")
        figures[f"conversation_{mode}_step_us"] = best[mode] * 1e6
        figures[f"conversation_{mode}_ratio_to_render"] = ratio
    print(f"({len(histories)} steps per mode; load average "
          f"{os.getloadavg()[0]:.2f})")
    print("RESULT " + json.dumps(figures))


if __name__ == "__main__":
    main()
