"""The producer's side of regenerated conversations: turn 0 once for all samples, with its state and a
``started`` event; --skip-done; a first turn the template rejects ends every lane at once."""

from __future__ import annotations

import json

import pytest

from eaglefeed.chat.conversation import ConversationState, turn_prompt_id
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.core.errors import ConfigError
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.ledger import open_ledger
from eaglefeed.producers.sources import SourceRow, discover
from eaglefeed.schemas import CONVERSATION_EVENT, PROMPT

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
ROW = {"id": "r1", "tools": [TOOL],
       "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
                    {"role": "assistant", "content": "a"}, {"role": "user", "content": "second"}]}


def build(row, **settings):
    builder = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), **settings), fast=False)
    return builder, builder.build([SourceRow(source="in.jsonl", line=1, raw=json.dumps(row).encode())])


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_turn_zero_is_one_prompt_for_every_sample_with_its_state_and_a_started_event(mode):
    builder, result = build(ROW, history=mode, samples=3, max_turns=5)
    [(key, value, tokens)] = result.prompts
    record = PROMPT.decode(value)
    state = ConversationState.from_json(record["conversation"])
    assert key.decode() == record["prompt_id"] == turn_prompt_id(state.conversation_id, 0, 0)
    assert (record["num_samples"], record["turn_index"], state.turn_index, state.max_turns) == (3, 0, 0, 5)
    assert state.mode == mode and state.tools == ROW["tools"]  # the tools keep their key order
    assert list(json.loads(record["conversation"])["tools"][0]) == ["type", "function"]
    expected = builder.renderer.render(ROW["messages"][:2], tools=ROW["tools"], template_kwargs={})
    assert record["input_ids"] == expected and tokens == len(expected)
    [(event_key, event_value)] = result.events
    event = CONVERSATION_EVENT.decode(event_value)
    assert (event["event"], event["lanes"], event["lane"], event["history_mode"], event["source_row"]) == (
        "started", 3, -1, mode, "r1")
    assert event_key == f"{state.conversation_id}:-1".encode()


def test_the_mode_changes_the_ids_and_original_history_stays_as_it_was():
    _, rerender = build(ROW, history="rerender")
    _, tokens = build(ROW, history="tokens")
    _, original = build(ROW)
    assert rerender.prompts[0][0] != tokens.prompts[0][0]
    assert PROMPT.decode(original.prompts[0][1])["conversation"] is None and not original.events


def test_skip_done_skips_a_conversation_whose_first_turn_has_every_sample(tmp_path, monkeypatch):
    _, first = build(ROW, history="rerender")
    pid = first.prompts[0][0].decode()
    monkeypatch.setattr("eaglefeed.producers.build.load_done",
                        lambda path, samples: frozenset({int(pid, 16)}))
    _, again = build(ROW, history="rerender", skip_done=tmp_path)
    assert again.prompts == [] and again.events == [] and again.skipped_done == 1


def test_a_row_without_a_user_turn_is_a_dead_letter_as_before():
    _, result = build({"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "u"}]},
                      history="tokens")
    assert [r.reason for r in result.rejected] == ["assistant_first"] and not result.events


def test_the_ledger_of_a_conversation_run_is_another_ledger(tmp_path):
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(json.dumps(ROW) + "\n")

    def ledger_path(**over):
        cfg = ProducerConfig(kafka=KafkaConfig(), inputs=(str(inputs),), state_dir=tmp_path / "state",
                             prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR), **over))
        ledger = open_ledger(cfg, files=discover(cfg.inputs))
        assert ledger is not None
        ledger.close()
        return ledger.path

    paths = {ledger_path(), ledger_path(history="rerender"), ledger_path(history="tokens"),
             ledger_path(history="tokens", max_turns=3)}
    assert len(paths) == 4


def test_turns_all_is_refused_with_a_history_mode():
    with pytest.raises(ConfigError, match="--turns all"):
        PromptSettings(tokenizer="t", history="rerender", turns="all")
    with pytest.raises(ConfigError):
        PromptSettings(tokenizer="t", history="regenerated")
