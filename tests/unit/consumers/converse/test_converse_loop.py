"""``run_converse`` through the in-memory Kafka: next prompts, lanes, ends, dead letters, commit after acks.

The conversation library is replaced by a scripted ``continue_after`` (its own tests are in
tests/unit/chat/conversation): these tests are about the stage around it.
"""

import dataclasses
import functools
import json
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from prometheus_client import CollectorRegistry

from eaglefeed.chat.conversation import ConversationState, Ended, NextPrompt, turn_prompt_id
from eaglefeed.chat.seeds import sample_seed
from eaglefeed.consumers.converse import loop, renderers, step
from eaglefeed.consumers.converse.loop import run_converse
from eaglefeed.core.config import ConverseConfig, KafkaConfig
from eaglefeed.core.errors import ConfigError, DeliveryError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.schemas import CONVERSATION_EVENT, DEAD_LETTER, GENERATION, PROMPT
from tests.fakes.kafka import FakeKafka

KAFKA = KafkaConfig(topic_prefix="c")
GROUP = KAFKA.default_group("converse")


class FakeRenderer:
    """Stands in for PromptRenderer: the stage only asks it for hashes."""

    loads = 0

    def __init__(self, name, *, fast=None, trust_remote_code=False):
        FakeRenderer.loads += 1
        self.tokenizer_id, self.tokenizer_hash = name, "tok-hash"
        # what --tool-format auto asks: no added tokens, a template that renders no tools ("none")
        self.tokenizer = SimpleNamespace(get_added_vocab=dict, chat_template="")

    def template_hash(self, tools):
        return "tpl-tools" if tools else "tpl"


@pytest.fixture
def kafka(monkeypatch):
    monkeypatch.setattr(renderers, "PromptRenderer", FakeRenderer)
    fake = FakeKafka()
    for topic, parts in ((KAFKA.generations_topic, 2), (KAFKA.dead_letter_topic, 1),
                         (KAFKA.conversations_topic, 1), (KAFKA.prompts_topic, 2)):
        fake.create_topic(topic, parts)
    return fake


@pytest.fixture
def script(monkeypatch):
    """``continue_after`` answers: NextPrompt (ids prompt+output+[9]), or Ended (length, ``end_at``)."""
    calls = []
    settings = {"end_at": None}

    def fake_continue(state, *, prompt_ids, output_ids, finish_reason, renderer, tool_format):
        calls.append((state, prompt_ids, output_ids, finish_reason, tool_format))
        if finish_reason == "length":
            return Ended("truncated", "length", state.turn_index + 1)
        if settings["end_at"] == state.turn_index:
            return Ended("complete", "user_turns_done", state.turn_index + 1)
        nxt = dataclasses.replace(state, turn_index=state.turn_index + 1, position=state.position + 2)
        return NextPrompt(nxt, [*prompt_ids, *output_ids, 9])

    monkeypatch.setattr(step, "continue_after", fake_continue)
    return calls, settings


def state(turn=0, lane=0, cid="c" * 32):
    return ConversationState(conversation_id=cid, lane=lane, turn_index=turn, mode="tokens", max_turns=8,
                             source_messages=[{"role": "user", "content": "hi"}], tools=None,
                             template_kwargs={}, position=1)


def generation(st, sample=0, *, finish="stop", sent=None, conversation=True):
    pid = turn_prompt_id(st.conversation_id, st.turn_index, st.lane if st.turn_index else 0)
    params = sent or {"max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.0,
                      "sampling_seed": sample_seed(pid, 100, sample), "stop_token_ids": [2]}
    return {
        "id": f"{pid}:{sample}", "prompt_id": pid, "sample_index": sample, "prompt_ids": [1, 2],
        "output_ids": [5, 6, 2], "finish_reason": finish, "matched_stop": 2, "prompt_tokens": 2,
        "completion_tokens": 3, "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
        "model_path": "m",
        "engine_version": "v", "engine": "sglang", "worker_id": "w", "source": "in.jsonl", "source_row": "7",
        "turn_index": st.turn_index, "sampling_params": json.dumps(params), "chat_template_kwargs": "{}",
        "tokenizer_id": "tok", "tokenizer_hash": "tok-hash", "chat_template_hash": "tpl",
        "prompt_created_at": 1, "created_at": 2, "conversation": st.to_json() if conversation else None,
    }


def append(kafka, record, partition=0):
    kafka.append(KAFKA.generations_topic, GENERATION.encode(record), key=record["id"].encode(),
                 partition=partition)


def run(kafka, **overrides):
    cfg = ConverseConfig(kafka=KAFKA, exit_when_idle=0.3, **overrides)
    return run_converse(cfg, stop=StopSignal(), registry=CollectorRegistry(), clients=kafka)


def prompts(kafka):
    return [PROMPT.decode(r.value) for r in kafka.read(KAFKA.prompts_topic)]


def events(kafka):
    return [CONVERSATION_EVENT.decode(r.value) for r in kafka.read(KAFKA.conversations_topic)]


def test_a_turn_becomes_the_next_prompt_of_its_lane_and_the_offset_is_committed(kafka, script):
    append(kafka, generation(state(turn=1, lane=0)))
    summary = run(kafka)
    [nxt] = prompts(kafka)
    follow = ConversationState.from_json(nxt["conversation"])
    assert nxt["prompt_id"] == turn_prompt_id("c" * 32, 2, 0) and follow.turn_index == 2
    assert nxt["input_ids"] == [1, 2, 5, 6, 2, 9] and nxt["num_samples"] == 1 and nxt["turn_index"] == 2
    assert nxt["sampling_params"] == {"max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                                      "min_p": 0.0, "stop_token_ids": [2], "seed": 100}
    assert (nxt["source"], nxt["source_row"], nxt["tokenizer_hash"]) == ("in.jsonl", "7", "tok-hash")
    [event] = events(kafka)
    assert (event["event"], event["turn_index"], event["lane"]) == ("turn", 2, 0)
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 1
    assert summary.continued == 1 and summary.records == 1


def test_each_sample_of_turn_zero_continues_its_own_lane_with_its_own_seed(kafka, script):
    for sample in range(3):
        append(kafka, generation(state(turn=0), sample))
    run(kafka)
    got = sorted((ConversationState.from_json(p["conversation"]).lane, p["sampling_params"]["seed"],
                  p["prompt_id"]) for p in prompts(kafka))
    assert got == [(s, 100 + s, turn_prompt_id("c" * 32, 1, s)) for s in range(3)]


def test_samples_of_one_n_request_share_the_base_seed_and_still_branch(kafka, script):
    pid = turn_prompt_id("c" * 32, 0, 0)
    sent = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
            "sampling_seed": sample_seed(pid, 40, 0), "n": 2}  # sample 0's seed, sent for both
    for sample in range(2):
        append(kafka, generation(state(turn=0), sample, sent=sent))
    run(kafka)
    assert sorted(p["sampling_params"]["seed"] for p in prompts(kafka)) == [40, 41]


def test_an_end_is_an_event_and_no_prompt(kafka, script):
    append(kafka, generation(state(turn=2, lane=1), finish="length"))
    summary = run(kafka)
    assert prompts(kafka) == []
    [event] = events(kafka)
    assert (event["event"], event["outcome"], event["reason"], event["turn_index"], event["lane"]) == (
        "ended", "truncated", "length", 3, 1)
    assert summary.ended == {"truncated/length": 1}


def test_single_turn_generations_are_passed_over_and_committed(kafka, script):
    append(kafka, generation(state(), conversation=False), partition=1)
    run(kafka)
    assert prompts(kafka) == [] and events(kafka) == [] and script[0] == []
    assert kafka.committed(GROUP, KAFKA.generations_topic, 1).offset == 1


def test_a_dead_lettered_conversation_prompt_ends_its_lanes(kafka, script):
    sampling = {"max_new_tokens": 4, "temperature": 0.0, "top_p": 1.0, "top_k": 1, "min_p": 0.0,
                "stop_token_ids": [], "seed": 0}
    turn0 = {"prompt_id": "p", "source": "in.jsonl", "source_row": "3", "turn_index": 0, "input_ids": [1],
             "num_samples": 2, "sampling_params": sampling,
             "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h",
             "chat_template_hash": "c",
             "created_at": 1, "conversation": state().to_json()}
    later = {**turn0, "turn_index": 2, "num_samples": 1,
             "conversation": state(turn=2, lane=1).to_json()}
    for value, record_id in ((turn0, "p:1"), (turn0, None), (later, "q:0")):
        letter = {"stage": "generate", "error_kind": "http_400", "message": "no",
                  "value": PROMPT.encode(value),
                  "record_id": record_id, "created_at": 1}
        kafka.append(KAFKA.dead_letter_topic, DEAD_LETTER.encode(letter))
    kafka.append(KAFKA.dead_letter_topic, DEAD_LETTER.encode({**letter, "stage": "sink"}))
    run(kafka)
    ended = [(e["lane"], e["outcome"], e["reason"], e["turn_index"]) for e in events(kafka)]
    assert ended == [(1, "dead_letter", "http_400", 0), (0, "dead_letter", "http_400", 0),
                     (1, "dead_letter", "http_400", 0), (1, "dead_letter", "http_400", 2)]
    assert kafka.committed(GROUP, KAFKA.dead_letter_topic, 0).offset == 4


def test_nothing_is_committed_before_the_outputs_are_acknowledged_and_a_replay_repeats_them(kafka, script):
    append(kafka, generation(state(turn=1)))
    kafka.fail_sends(KafkaTimeoutError("no ack"), topic=KAFKA.prompts_topic)
    with pytest.raises(DeliveryError):
        run(kafka)
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0) is None
    run(kafka)  # the restart replays the record and publishes the same prompt id
    assert [p["prompt_id"] for p in prompts(kafka)] == [turn_prompt_id("c" * 32, 2, 0)]
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 1


def test_a_state_that_does_not_parse_is_dead_lettered_and_passed(kafka, script):
    append(kafka, {**generation(state(turn=1)), "conversation": '{"nope": 1}'})
    summary = run(kafka)
    [letter] = [DEAD_LETTER.decode(r.value) for r in kafka.read(KAFKA.dead_letter_topic)]
    assert (letter["stage"], letter["error_kind"]) == ("converse", "bad_conversation_state")
    assert summary.dead_lettered == 1 and kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 1


def test_another_tokenizer_stops_the_stage_before_any_commit(kafka, script):
    append(kafka, {**generation(state(turn=1)), "tokenizer_hash": "other"})
    with pytest.raises(ConfigError, match="not the one the prompts were rendered with"):
        run(kafka)
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0) is None and prompts(kafka) == []


def test_a_next_prompt_over_the_cap_ends_the_lane(kafka, script):
    append(kafka, generation(state(turn=1)))
    run(kafka, max_prompt_tokens=4)
    [event] = events(kafka)
    assert (event["outcome"], event["reason"]) == ("truncated", "prompt_too_long") and prompts(kafka) == []


def test_the_summary_line_names_the_counts():
    summary = loop.ConverseSummary(records=3, continued=2, ended={"complete/user_turns_done": 1})
    assert "published 2 next-turn prompts" in summary.describe()
    assert "complete/user_turns_done=1" in summary.describe()


def test_a_second_copy_of_a_generation_is_not_continued(kafka, script):
    first = generation(state(turn=1))
    append(kafka, first)
    append(kafka, {**first, "output_ids": [7, 7, 2]})  # a crashed worker's retry, sampled anew
    run(kafka)
    [nxt] = prompts(kafka)
    assert nxt["input_ids"] == [1, 2, 5, 6, 2, 9]  # continued from the copy the sink keeps


def test_an_unknown_tool_call_format_is_refused_before_anything_starts(kafka):
    with pytest.raises(ConfigError, match="--tool-format"):
        run(kafka, tool_format="xml")


def test_a_generation_of_an_unknown_schema_is_dead_lettered_with_its_bytes_to_re_drive(kafka, script):
    value = b"\xc3\x01" + b"\xee" * 8 + b"body of a newer writer"
    kafka.append(KAFKA.generations_topic, value, key=b"k")
    summary = run(kafka)
    [letter] = [DEAD_LETTER.decode(r.value) for r in kafka.read(KAFKA.dead_letter_topic)]
    assert (letter["stage"], letter["error_kind"]) == ("converse", "unknown_schema")
    assert (letter["topic"], letter["key"], letter["value"]) == (KAFKA.generations_topic, b"k", value)
    assert summary.dead_lettered == 1 and kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 1


def test_a_state_that_does_not_parse_still_ends_its_lane_when_its_ids_read(kafka, script):
    bad = json.dumps({"conversation_id": "d" * 32, "lane": 0, "turn_index": 0, "mode": "tokens", "nope": 1})
    append(kafka, {**generation(state(turn=0)), "conversation": bad, "sample_index": 1})
    append(kafka, {**generation(state(turn=2)), "id": "x:0", "conversation": '{"lane": "one"}'})
    registry = CollectorRegistry()
    run_converse(ConverseConfig(kafka=KAFKA, exit_when_idle=0.3), stop=StopSignal(), registry=registry,
                 clients=kafka)
    [event] = events(kafka)
    assert (event["conversation_id"], event["lane"], event["event"]) == ("d" * 32, 1, "ended")
    assert event["turn_index"] == 1  # turn 0's row is in the dataset
    assert (event["outcome"], event["reason"]) == ("dead_letter", "bad_conversation_state")
    assert len(kafka.read(KAFKA.dead_letter_topic)) == 2
    assert registry.get_sample_value("eaglefeed_converse_unaccounted_total", {"input": "generation"}) == 1


def test_a_worker_dead_letter_whose_prompt_does_not_read_is_counted(kafka, script):
    letter = {"stage": "generate", "error_kind": "undecodable_prompt", "message": "no", "value": b"junk",
              "record_id": None, "created_at": 1}
    kafka.append(KAFKA.dead_letter_topic, DEAD_LETTER.encode(letter))
    registry = CollectorRegistry()
    run_converse(ConverseConfig(kafka=KAFKA, exit_when_idle=0.3), stop=StopSignal(), registry=registry,
                 clients=kafka)
    assert events(kafka) == []
    assert registry.get_sample_value("eaglefeed_converse_unaccounted_total", {"input": "dead_letter"}) == 1
    assert kafka.committed(GROUP, KAFKA.dead_letter_topic, 0).offset == 1


def test_lane_metrics_are_monotonic_counters_a_restarted_member_cannot_drive_negative(kafka, script):
    script[1]["end_at"] = 2
    append(kafka, generation(state(turn=2)))  # a lane whose turn 0 another member (or run) continued
    registry = CollectorRegistry()
    run_converse(ConverseConfig(kafka=KAFKA, exit_when_idle=0.3), stop=StopSignal(), registry=registry,
                 clients=kafka)
    assert registry.get_sample_value("eaglefeed_converse_conversations_in_progress") is None
    assert registry.get_sample_value("eaglefeed_converse_conversations_ended_total",
                                     {"outcome": "complete", "reason": "user_turns_done"}) == 1
    assert registry.get_sample_value("eaglefeed_converse_conversations_started_total") == 0


def test_a_library_failure_ends_the_lane_counting_the_turn_whose_row_exists(kafka, monkeypatch):
    def broken(state, **_):
        raise RuntimeError("a bug")

    monkeypatch.setattr(step, "continue_after", broken)
    append(kafka, generation(state(turn=2)))
    run(kafka)
    [event] = events(kafka)
    assert (event["outcome"], event["reason"], event["turn_index"]) == ("dead_letter", "internal_error", 3)
    [letter] = [DEAD_LETTER.decode(r.value) for r in kafka.read(KAFKA.dead_letter_topic)]
    assert letter["error_kind"] == "internal_error"


@pytest.mark.parametrize("at_send", [False, True])
def test_a_next_prompt_the_broker_refuses_for_good_ends_the_lane_and_is_committed(kafka, script, at_send):
    append(kafka, generation(state(turn=1)))
    kafka.fail_sends(MessageSizeTooLargeError("too large"), topic=KAFKA.prompts_topic, at_send=at_send)
    summary = run(kafka)
    assert prompts(kafka) == []
    ended = [e for e in events(kafka) if e["event"] == "ended"]
    assert [(e["outcome"], e["reason"], e["turn_index"]) for e in ended] == [
        ("truncated", "record_too_large", 2)]
    assert summary.ended == {"truncated/record_too_large": 1} and summary.continued == 0
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 1


def test_auto_takes_the_producers_format_else_the_tokenizers_and_stops_when_it_cannot_tell():
    make = functools.partial(step.Stepper, renderers=renderers.Renderers(), metrics=None,
                             max_prompt_tokens=100)
    stepper = make(tool_format="auto")
    state = ConversationState(conversation_id="c", lane=0, turn_index=0, mode="rerender", max_turns=4,
                              source_messages=[{"role": "user", "content": "u"}], tools=None,
                              template_kwargs={}, position=1)
    added = {"<|tool_calls_section_begin|>": 9}
    kimi = SimpleNamespace(tokenizer=SimpleNamespace(get_added_vocab=lambda: added, chat_template=""))
    unknown = SimpleNamespace(tokenizer=SimpleNamespace(get_added_vocab=dict, chat_template="{{ tools }}"))
    assert stepper._tool_format(dataclasses.replace(state, tool_format="glm45"), kimi, "k") == "glm45"
    assert stepper._tool_format(state, kimi, "k") == "kimi_k2"
    assert stepper._tool_format(state, unknown, "u") == "none"  # no tools: nothing to parse
    with pytest.raises(ConfigError, match="cannot tell the tool-call format of tokenizer 'u'"):
        stepper._tool_format(dataclasses.replace(state, tools=[{"type": "function"}]), unknown, "u")
    named = make(tool_format="mistral")
    assert named._tool_format(dataclasses.replace(state, tool_format="glm45"), kimi, "k") == "mistral"


def test_a_drained_partition_is_committed_past_an_exactly_once_workers_commit_marker(kafka, script):
    # The converse analogue of the sink's: committed one past its last record, the marker after it
    # left the group a lag of 1 for good (another member's group-wide --exit-when-idle waited on it).
    producer = kafka.producer(transactional_id="w")
    producer.init_transactions()
    producer.begin_transaction()
    record = generation(state(turn=1, lane=0))
    producer.send(KAFKA.generations_topic, GENERATION.encode(record), key=record["id"].encode(), partition=0)
    producer.commit_transaction()
    summary = run(kafka)
    assert summary.continued == 1
    assert kafka.committed(GROUP, KAFKA.generations_topic, 0).offset == 2  # the record and the marker
