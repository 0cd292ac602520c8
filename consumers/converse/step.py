"""One continuation step: a generation (or a dead letter) of a conversation prompt → what to publish.

No Kafka here: :class:`Stepper` turns a decoded record into :class:`Output` messages (the next
PromptRecord, ConversationEvents, dead letters). Everything it publishes is a function of the
record alone, so a replay after a crash publishes the same keys and values (timestamps aside).

Lanes: a turn-0 prompt is one record with ``num_samples = n``; generation sample ``s`` continues
lane ``s``, whose later prompts have ``num_samples = 1`` and the base seed + ``s``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.chat.conversation import (
    RECORD_TOO_LARGE,
    TRUNCATED,
    ConversationState,
    Ended,
    NextPrompt,
    continue_after,
    turn_prompt_id,
)
from eaglefeed.chat.seeds import base_seed
from eaglefeed.chat.toolcalls import AUTO, Detected, choose_format, has_tools, unknown_format
from eaglefeed.consumers.converse.renderers import Renderers
from eaglefeed.core.clients import Record
from eaglefeed.core.errors import ConfigError, SchemaError
from eaglefeed.core.metrics import ConverseMetrics
from eaglefeed.schemas import GENERATION, PROMPT
from eaglefeed.schemas.conversation_events import conversation_event
from eaglefeed.schemas.deadletter import dead_letter_for

log = logging.getLogger(__name__)

SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p")
SEEN_LIMIT = 1_000_000  # generation ids remembered to continue from the first copy only (~100 MB at most)


@dataclass(frozen=True)
class Output:
    """A message to publish: topic role (``prompts``, ``conversations``, ``dead_letter``), key, value.

    ``refused``: what to publish instead when the broker refuses this message for good (a next
    prompt larger than it accepts ends its lane), or None: such a refusal stops the stage.
    """

    role: str
    key: bytes
    value: bytes
    refused: Callable[[], list[Output]] | None = field(default=None, compare=False, repr=False)


@dataclass
class StepCounts:
    """What the steps of one run did."""

    continued: int = 0
    ended: dict[str, int] = field(default_factory=dict)  # "outcome/reason" -> lanes
    dead_lettered: int = 0
    duplicates: int = 0


class Stepper:
    """Continue conversations from their generations; end lanes whose prompt was dead-lettered.

    Args:
        renderers: the chat-template renderers, by tokenizer.
        metrics: the stage's metrics.
        tool_format: the tool-call format of the regenerated turns, or ``auto``: the one the
            producer recorded in the conversation's state, else what the tokenizer tells.
        max_prompt_tokens: a longer next prompt ends the lane (``prompt_too_long``).
    """

    def __init__(self, *, renderers: Renderers, metrics: ConverseMetrics, tool_format: str,
                 max_prompt_tokens: int) -> None:
        self.renderers = renderers
        self.metrics = metrics
        self.tool_format = tool_format
        self.max_prompt_tokens = max_prompt_tokens
        self.counts = StepCounts()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._detected: dict[int, Detected] = {}  # id(renderer) -> what auto found in its tokenizer
        self._warned = False

    def generation(self, gen: dict[str, Any], rec: Record) -> list[Output]:
        """The outputs of one decoded GenerationRecord (none when it is not a conversation's).

        Raises:
            ConfigError: the prompt's tokenizer cannot be loaded here (the stage must stop).
        """
        if gen.get("conversation") is None:
            return []
        if not self._first_copy(gen["id"]):
            # A worker that crashed after publishing may publish a turn twice, and a sampling
            # engine may answer differently the second time. The sink keeps the first copy (its
            # partition's order, which this stage reads too), so only that one is continued: the
            # next turn is then built from the row the dataset holds.
            self.counts.duplicates += 1
            return []
        try:
            state = ConversationState.from_json(gen["conversation"])
        except ValueError as exc:
            self._seen.pop(gen["id"], None)  # a re-driven copy must be continued, not taken for a duplicate
            letter = self._dead_letter(rec, "bad_conversation_state", str(exc), gen["id"])
            lane = lenient_lane(gen["conversation"])
            if lane is None:
                self._unaccounted("generation", f"{rec.topic}-{rec.partition}@{rec.offset}")
                return [letter]
            if lane.turn_index == 0:
                lane = dataclasses.replace(lane, lane=gen["sample_index"])
            # The turn's row is in the dataset (the sink writes it): turns_done counts it.
            done = lane.turn_index + 1
            return [letter, self._ended(lane, gen, "dead_letter", "bad_conversation_state", done,
                                        counted=lane.turn_index > 0)]
        if state.turn_index == 0 and state.lane != gen["sample_index"]:
            state = dataclasses.replace(state, lane=gen["sample_index"])  # sample s continues lane s
        if state.turn_index == 0:
            self.metrics.started.inc()
        renderer = self.renderers.get(gen["tokenizer_id"], gen["tokenizer_hash"])
        tool_format = self._tool_format(state, renderer, gen["tokenizer_id"])
        started = time.perf_counter()
        try:
            step = continue_after(state, prompt_ids=list(gen["prompt_ids"]),
                                  output_ids=list(gen["output_ids"]), finish_reason=gen["finish_reason"],
                                  renderer=renderer,
                                  tool_format=tool_format)
        except Exception as exc:  # noqa: BLE001 - a library bug must not stall the stage: record it
            log.exception("continuing %s lane %d failed", state.conversation_id, state.lane)
            self._seen.pop(gen["id"], None)  # a re-driven copy must be continued, not taken for a duplicate
            # This turn's row is in the dataset (the sink writes every generation): turns_done counts it.
            return [self._dead_letter(rec, "internal_error", repr(exc), gen["id"]),
                    self._ended(state, gen, "dead_letter", "internal_error", state.turn_index + 1)]
        if isinstance(step, NextPrompt) and len(step.input_ids) > self.max_prompt_tokens:
            step = Ended("truncated", "prompt_too_long", state.turn_index + 1)
        self.metrics.continuation_seconds.observe(time.perf_counter() - started)
        if isinstance(step, Ended):
            return [self._ended(state, gen, step.outcome, step.reason, step.turns_done)]
        return self._next(step, gen, renderer.template_hash(step.state.tools))

    def unreadable(self, rec: Record, kind: str, message: str) -> Output:
        """A dead letter (stage ``converse``) of an input record this stage cannot decode, bytes kept."""
        return self._dead_letter(rec, kind, message, None)

    def _tool_format(self, state: ConversationState, renderer: Any, tokenizer_id: str) -> str:
        """The format this lane's turn is parsed with: the flag's, the producer's, or the tokenizer's.

        Raises:
            ConfigError: ``auto`` cannot tell the tokenizer's format and the conversation has tools.
        """
        if self.tool_format != AUTO:
            return self.tool_format
        if state.tool_format:
            return state.tool_format
        found = self._detected.get(id(renderer))
        if found is None:
            found = self._detected[id(renderer)] = choose_format(AUTO, renderer.tokenizer)
            log.info("tool-call format of %s: %s (%s)", tokenizer_id, found.name or "cannot tell", found.why)
        if found.name is not None:
            return found.name
        if has_tools(state.tools, state.source_messages):
            raise ConfigError(unknown_format(tokenizer_id, found))
        return "none"

    def _first_copy(self, record_id: str) -> bool:
        if record_id in self._seen:
            return False
        self._seen[record_id] = None
        if len(self._seen) > SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    def dead_letter(self, letter: dict[str, Any]) -> list[Output]:
        """End the lanes of a conversation prompt the worker dead-lettered (``ended``/``dead_letter``)."""
        if letter["stage"] != "generate" or not letter.get("value"):
            return []
        try:
            prompt = PROMPT.decode(letter["value"])
        except SchemaError:
            # Perhaps a conversation's prompt, perhaps not: count it (its lane, if any, never ends).
            self._unaccounted("dead_letter", letter.get("record_id") or "a prompt")
            return []
        if prompt.get("conversation") is None:
            return []
        state: ConversationState | Lane
        try:
            state = ConversationState.from_json(prompt["conversation"])
        except ValueError:
            lenient = lenient_lane(prompt["conversation"])
            if lenient is None:
                self._unaccounted("dead_letter", prompt["prompt_id"])
                return []
            state = lenient
        record_id = letter.get("record_id") or ""
        sample = record_id.rpartition(":")[2]
        if state.turn_index == 0:
            lanes = [int(sample)] if sample.isdigit() else list(range(prompt["num_samples"]))
        else:
            lanes = [state.lane]
        tag = {"source": prompt["source"], "source_row": prompt["source_row"]}
        return [self._ended(dataclasses.replace(state, lane=lane), tag, "dead_letter", letter["error_kind"],
                            state.turn_index, counted=state.turn_index > 0) for lane in lanes]

    def _next(self, step: NextPrompt, gen: dict[str, Any], template_hash: str) -> list[Output]:
        state = step.state
        pid = turn_prompt_id(state.conversation_id, state.turn_index, state.lane)
        record = {
            "prompt_id": pid, "source": gen["source"], "source_row": gen["source_row"],
            "turn_index": state.turn_index, "input_ids": step.input_ids, "num_samples": 1,
            "sampling_params": next_sampling(gen), "chat_template_kwargs": gen["chat_template_kwargs"],
            "tokenizer_id": gen["tokenizer_id"], "tokenizer_hash": gen["tokenizer_hash"],
            "chat_template_hash": template_hash, "created_at": int(time.time() * 1000),
            "conversation": state.to_json(),
            "model": gen["model_path"] or None,  # the next turn is for the model that served this one
        }
        key, value = conversation_event(conversation_id=state.conversation_id, lane=state.lane, event="turn",
                                        turn_index=state.turn_index, history_mode=state.mode,
                                        source=gen["source"], source_row=gen["source_row"])
        self.counts.continued += 1
        self.metrics.turns_continued.inc()
        prompt = Output("prompts", pid.encode(), PROMPT.encode(record),
                        refused=lambda: self._too_large(state, gen))
        return [prompt, Output("conversations", key, value)]

    def _too_large(self, state: ConversationState, gen: dict[str, Any]) -> list[Output]:
        """The lane's end when the broker refused its next prompt for good (too large for it)."""
        log.warning("the broker refused the next prompt of %s lane %d for good: the lane ends (%s)",
                    state.conversation_id, state.lane, RECORD_TOO_LARGE)
        self.counts.continued -= 1
        return [self._ended(state, gen, TRUNCATED, RECORD_TOO_LARGE, state.turn_index)]

    def _unaccounted(self, source: str, what: str) -> None:
        self.metrics.unaccounted.labels(source).inc()
        if not self._warned:
            self._warned = True
            log.warning("a dead-lettered %s (%s) names no readable conversation lane: if it was a "
                        "conversation's, that lane gets no ended event (counted in "
                        "eaglefeed_converse_unaccounted_total; this is logged once)", source, what)

    def _ended(self, state: ConversationState | Lane, where: dict[str, Any], outcome: str, reason: str,
               turns_done: int, *, counted: bool = True) -> Output:
        key, value = conversation_event(conversation_id=state.conversation_id, lane=state.lane, event="ended",
                                        turn_index=turns_done, history_mode=state.mode, outcome=outcome,
                                        reason=reason, source=where["source"], source_row=where["source_row"])
        label = f"{outcome}/{reason}"
        self.counts.ended[label] = self.counts.ended.get(label, 0) + 1
        self.metrics.ended.labels(outcome, reason).inc()
        if not counted:  # a lane that never reached continue_after at turn 0 was not counted as started
            self.metrics.started.inc()
        return Output("conversations", key, value)

    def _dead_letter(self, rec: Record, kind: str, message: str, record_id: str | None) -> Output:
        log.warning("dead letter (%s) for %s-%d@%d: %s", kind, rec.topic, rec.partition, rec.offset, message)
        self.counts.dead_lettered += 1
        self.metrics.dead_letters.labels(kind).inc()
        return Output("dead_letter", f"{rec.topic}:{rec.partition}:{rec.offset}".encode(),
                      dead_letter_for(rec, stage="converse", kind=kind, message=message, record_id=record_id,
                                      codec=GENERATION))


@dataclass(frozen=True)
class Lane:
    """What an ``ended`` event needs of a conversation state that does not parse as a whole."""

    conversation_id: str
    lane: int
    turn_index: int
    mode: str


def lenient_lane(text: Any) -> Lane | None:
    """The conversation id, lane, turn and mode of a state JSON, when at least the first three read."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    cid, lane, turn, mode = (data.get(k) for k in ("conversation_id", "lane", "turn_index", "mode"))
    if not (isinstance(cid, str) and cid and _count(lane) and _count(turn)):
        return None
    assert isinstance(lane, int) and isinstance(turn, int)
    return Lane(cid, lane, turn, mode if isinstance(mode, str) else "")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def next_sampling(gen: dict[str, Any]) -> dict[str, Any]:
    """The PromptRecord sampling params of the next turn of this generation's lane.

    The record holds the params sent: ``sampling_seed`` is sample ``index``'s seed (one request
    per sample) or sample 0's (``n`` samples in one request), both derived from the prompt id and
    the base seed (``eaglefeed.chat.seeds``), which :func:`base_seed` recovers. Lane ``s``
    continues with base seed + ``s``; its later prompts have one sample, so their base is carried on.
    """
    sent = json.loads(gen["sampling_params"])
    index = gen["sample_index"]
    # Every request sends ``n`` (1 for one sample each); with n > 1 the seed sent is sample 0's.
    sent_for = 0 if int(sent.get("n", 1)) > 1 else index
    base = base_seed(gen["prompt_id"], int(sent.get("sampling_seed", 0)), sent_for)
    params = {k: sent[k] for k in SAMPLING_KEYS}
    params["stop_token_ids"] = list(sent.get("stop_token_ids", []))
    params["seed"] = base + index
    return params
