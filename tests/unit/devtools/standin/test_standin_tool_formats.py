"""``--tool-call-format``: the stand-in's calls in every format continue a conversation through the library.

The stand-in writes each format by itself (eaglefeed.devtools.standin.output.toolformats) and the
pipeline parses it with its own parser (eaglefeed.chat.toolcalls): a 4-turn conversation with two
turns of two parallel calls is regenerated in both history modes with each family's tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eaglefeed.chat.conversation import Ended, NextPrompt, continue_after, start
from eaglefeed.chat.prompts import parse_row
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.devtools.standin.output import OutputModel, plan_completion
from eaglefeed.devtools.standin.sampling import parse_sampling_params
from eaglefeed.devtools.standin.vocab import load_vocab
from tests.conversation_rows import parallel_tool_row
from tests.toolcall_tokenizers import FORMAT_NAMES, write_family_tokenizer

# What the published formats allow in tokens mode: Harmony rewrites a final answer's <|return|> as
# <|end|> in history, so a lane is not prefix-stable after a text answer that messages follow.
# (GLM-4.5 stops at the next message's role token, <|observation|> or <|user|>: that continues.)
TOKENS_END = {"gpt_oss": ("not_prefix_stable", 2)}


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[PromptRenderer, Any]]:
    root: Path = tmp_path_factory.mktemp("standin-formats")
    out = {}
    for fmt in FORMAT_NAMES:
        folder = write_family_tokenizer(fmt, root / fmt)
        out[fmt] = (PromptRenderer(str(folder)), load_vocab(folder))
    return out


def _chain(fmt: str, mode: str, renderer: PromptRenderer,
           vocab: Any) -> tuple[list[NextPrompt], list[list[int]], Ended]:
    model = OutputModel(output_len_mean=20, output_len_sigma=0.3, think_fraction=1.0, tool_call_fraction=1.0,
                        length_fraction=0.0, parallel_tool_call_fraction=1.0, tool_call_format=fmt)
    step = start(parse_row(parallel_tool_row(), default_id="0"), mode=mode, max_turns=8, lane=0,
                 renderer=renderer, conversation_id="s")
    prompts, outputs = [], []
    while isinstance(step, NextPrompt):
        prompts.append(step)
        params = parse_sampling_params({"sampling_seed": 7}, vocab_size=vocab.vocab_size)
        done = plan_completion(vocab=vocab, model=model, input_ids=step.input_ids, params=params,
                               max_new_tokens=400)
        outputs.append(done.output_ids)
        step = continue_after(step.state, prompt_ids=step.input_ids, output_ids=done.output_ids,
                              finish_reason=done.finish_reason["type"], renderer=renderer, tool_format=fmt)
    return prompts, outputs, step


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_parallel_calls_pair_and_the_conversation_completes_in_rerender(fmt, families):
    renderer, vocab = families[fmt]
    prompts, outputs, ended = _chain(fmt, "rerender", renderer, vocab)
    assert ended == Ended("complete", "user_turns_done", 4)
    history = prompts[-1].state.history
    regenerated = [m for m in history if m["role"] == "assistant"]
    assert [len(m.get("tool_calls", [])) for m in regenerated] == [2, 0, 2]
    for message, out in zip(regenerated, outputs, strict=False):
        text = renderer.tokenizer.decode(out, skip_special_tokens=False)
        cities = [c["function"]["arguments"]["city"] for c in message.get("tool_calls", [])]
        # the stand-in wrote these arguments, in this order, into its output
        at = [text.find(f'"{city}"' if fmt != "glm45" else f">{city}<") for city in cities]
        assert -1 not in at and at == sorted(at)
        assert all(c["function"]["name"] == "get_weather" for c in message.get("tool_calls", []))
    for k, prompt in enumerate(prompts):  # every prompt is the template on the history it carries
        expected = renderer.tokenizer.apply_chat_template(prompt.state.history, tools=prompt.state.tools,
                                                          add_generation_prompt=True, tokenize=False)
        assert renderer.tokenizer(expected, add_special_tokens=False)["input_ids"] == prompt.input_ids, k


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_tokens_mode_extends_each_prompt_by_its_output(fmt, families):
    renderer, vocab = families[fmt]
    prompts, outputs, ended = _chain(fmt, "tokens", renderer, vocab)
    reason, done = TOKENS_END.get(fmt, ("user_turns_done", 4))
    assert (ended.reason, ended.turns_done) == (reason, done), ended.detail
    for before, out, after in zip(prompts, outputs, prompts[1:], strict=False):
        assert after.input_ids[:len(before.input_ids) + len(out)] == before.input_ids + out
