"""The producer's sampling mix: each row's temperature and template kwargs drawn from what the row is,
recorded in its prompt, reproduced by a rerun or resume, kept by every sample and turn, and keying the
progress ledger."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import pytest

from eaglefeed.chat.conversation import ConversationState, NextPrompt, continue_after
from eaglefeed.chat.prompts import parse_row, source_identity
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.mixes import SamplingMix, parse_temperature_cycle, parse_template_kwargs_cycle
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.ledger import open_ledger
from eaglefeed.producers.settings import FileOverrides
from eaglefeed.producers.sources import SourceRow, discover
from eaglefeed.schemas import PROMPT

MIX = SamplingMix(temperatures=parse_temperature_cycle("0,0.6,1.0"),
                  template_kwargs=parse_template_kwargs_cycle("enable_thinking=true,false"))
EMPTY_THINK = "<think>\n\n</think>\n\n"  # what the demo template adds with enable_thinking false


def question(i: int) -> dict:
    return {"id": f"q{i}", "messages": [{"role": "user", "content": f"question number {i}"}]}


def build(rows, *, mix=MIX, overrides=None, **settings):
    builder = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), mix=mix, **settings), fast=False)
    extra = {"overrides": overrides} if overrides else {}
    source = [SourceRow("in.jsonl", n, json.dumps(row).encode(), **extra) for n, row in enumerate(rows, 1)]
    return builder, [PROMPT.decode(v) for _k, v, _n in builder.build(source).prompts]


def chosen(record) -> tuple[float, str]:
    return record["sampling_params"]["temperature"], record["chat_template_kwargs"]


def test_every_row_records_the_entries_its_identity_draws_and_each_entry_is_used():
    rows = [question(i) for i in range(30)]
    builder, records = build(rows)
    assert len(records) == 30
    for row, record in zip(rows, records, strict=True):
        t, k = MIX.draw(source_identity(parse_row(row, default_id="")))
        assert chosen(record) == (MIX.temperatures[t][0], json.dumps(dict(MIX.template_kwargs[k][0])))
        # the prompt is rendered with the kwargs it records (checked with the tokenizer's own template)
        kwargs = json.loads(record["chat_template_kwargs"])
        assert record["input_ids"] == builder.renderer.tokenizer.apply_chat_template(
            row["messages"], add_generation_prompt=True, tokenize=True, return_dict=True,
            **kwargs)["input_ids"]
        think = builder.renderer.tokenizer.encode(EMPTY_THINK, add_special_tokens=False)
        assert (record["input_ids"][-len(think):] == think) is (kwargs == {"enable_thinking": False})
    assert Counter(r["sampling_params"]["temperature"] for r in records).keys() == {0.0, 0.6, 1.0}
    assert len({r["chat_template_kwargs"] for r in records}) == 2


def test_a_rerun_in_another_order_and_batching_draws_the_same_for_every_row():
    rows = [question(i) for i in range(20)]
    _, first = build(rows)
    _, resumed = build(rows[12:])  # a resume reads only the rows after the ledger's position
    _, shuffled = build(rows[::-1])
    by_id = {r["source_row"]: (r["prompt_id"], chosen(r)) for r in first}
    assert all(by_id[r["source_row"]] == (r["prompt_id"], chosen(r)) for r in resumed + shuffled)


def test_the_draw_comes_from_the_rows_content_not_its_id_or_line_unless_duplicates_are_kept():
    row = question(3)
    twin = {**row, "id": "another id"}
    _, (a, b) = build([row, twin], keep_duplicates=True)
    identities = [source_identity(parse_row(r, default_id=""), keep_duplicates=keep)
                  for r in (row, twin) for keep in (False, True)]
    assert identities[0] == identities[2] and identities[1] != identities[3]
    # merged (the default): identical rows draw the same, so they stay one prompt
    _, merged = build([row, twin])
    assert len({r["prompt_id"] for r in merged}) == 1
    # kept apart: each row id draws its own (these two happen to differ in temperature or kwargs)
    assert a["prompt_id"] != b["prompt_id"]
    assert [chosen(a), chosen(b)] == [
        (MIX.temperatures[t][0], json.dumps(dict(MIX.template_kwargs[k][0])))
        for t, k in (MIX.draw(identities[1]), MIX.draw(identities[3]))]


def test_an_overrides_file_and_the_row_still_win_over_the_cycle():
    row = {**question(1), "sampling_params": {"temperature": 0.25}}
    file = FileOverrides(template_kwargs={"enable_thinking": True})
    _, (own, filed) = build([row, question(2)], overrides=file)
    assert own["sampling_params"]["temperature"] == 0.25
    assert own["chat_template_kwargs"] == filed["chat_template_kwargs"] == '{"enable_thinking": true}'
    assert filed["sampling_params"]["temperature"] in (0.0, 0.6, 1.0)


def test_a_cycle_entry_is_merged_over_the_command_line_kwargs():
    mix = SamplingMix(template_kwargs=parse_template_kwargs_cycle("reasoning_effort=low,high"))
    _, records = build([question(i) for i in range(8)], mix=mix,
                       chat_template_kwargs={"enable_thinking": False})
    seen = {r["chat_template_kwargs"] for r in records}
    assert seen == {'{"enable_thinking": false, "reasoning_effort": "low"}',
                    '{"enable_thinking": false, "reasoning_effort": "high"}'}


def test_every_sample_and_every_turn_of_a_row_keeps_its_draw():
    history = {"id": "h", "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}
    _, records = build([history], turns="all", samples=4)
    assert len(records) == 2 and {r["num_samples"] for r in records} == {4}
    assert len({chosen(r) for r in records}) == 1  # one draw for the row, so for both of its prompts


def test_a_cycle_entry_that_sets_a_rendering_parameter_stops_the_run_naming_the_flag():
    with pytest.raises(ConfigError, match=r"^--template-kwargs-cycle: .*may not set \['tokenize'\]"):
        build([], mix=SamplingMix(template_kwargs=parse_template_kwargs_cycle("tokenize=true,false")))


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_a_conversation_renders_every_later_turn_with_the_kwargs_its_first_turn_drew(mode):
    """Turn 0's state carries the merged kwargs (the command line's included), so converse keeps them."""
    mix = SamplingMix(template_kwargs=(({"enable_thinking": False}, 1),))
    row = {"id": "c", "messages": [{"role": "user", "content": "first"},
                                   {"role": "assistant", "content": "x"},
                                   {"role": "user", "content": "second"}]}
    builder, [record] = build([row], mix=mix, history=mode, samples=2)
    state = ConversationState.from_json(record["conversation"])
    assert state.template_kwargs == {"enable_thinking": False}
    tokenizer = builder.renderer.tokenizer
    output = tokenizer.encode("Sure.<|im_end|>", add_special_tokens=False)
    step = continue_after(state, prompt_ids=record["input_ids"], output_ids=output, finish_reason="stop",
                          renderer=builder.renderer, tool_format="none")
    assert isinstance(step, NextPrompt)
    think = tokenizer.encode(EMPTY_THINK, add_special_tokens=False)
    assert step.input_ids[-len(think):] == think  # turn 1 without thinking, as turn 0 was


def test_the_ledger_of_a_run_is_keyed_by_its_cycles(tmp_path):
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(json.dumps(question(0)) + "\n")

    def ledger_path(mix: SamplingMix):
        cfg = ProducerConfig(kafka=KafkaConfig(), inputs=(str(inputs),), state_dir=tmp_path / "state",
                             prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR), mix=mix))
        ledger = open_ledger(cfg, files=discover(cfg.inputs))
        assert ledger is not None
        ledger.close()
        return ledger.path

    paths = [ledger_path(SamplingMix()), ledger_path(MIX), ledger_path(MIX),
             ledger_path(SamplingMix(temperatures=parse_temperature_cycle("0,0.6,1.0:2"))),
             ledger_path(SamplingMix(template_kwargs=MIX.template_kwargs))]
    assert paths[1] == paths[2]  # the same cycles resume the same run
    assert len({paths[0], paths[1], paths[3], paths[4]}) == 4


def test_render_processes_draw_what_the_producer_process_draws():
    """A render process builds its builder from the pickled settings: the mix travels with them."""
    rows = [question(i) for i in range(12)]
    settings = PromptSettings(tokenizer=str(TOKENIZER_DIR), mix=MIX)
    copied = pickle.loads(pickle.dumps(settings))
    assert copied.mix == MIX
    source = [SourceRow("in.jsonl", n, json.dumps(row).encode()) for n, row in enumerate(rows, 1)]
    here, there = (PromptBuilder(s, fast=False).build(source).prompts for s in (settings, copied))
    assert [k for k, _v, _n in here] == [k for k, _v, _n in there]
