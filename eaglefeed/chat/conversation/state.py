"""What a conversation carries from one turn to the next, and what a turn step returns.

A :class:`ConversationState` travels with every prompt of a regenerated conversation (as JSON in
the record's ``conversation`` field) so that the stage that continues it needs nothing else: the
source messages, tools and template kwargs, where in the source the next assistant turn is, and
(for ``rerender``) the history sent so far.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

HISTORY_MODES = ("rerender", "tokens")  # how earlier turns reach the next prompt
OUTCOMES = ("complete", "truncated")  # how a conversation ends (dead letters are the stage's)


@dataclass(frozen=True)
class ConversationState:
    """One lane of one conversation, just before assistant turn ``turn_index`` is generated.

    Attributes:
        conversation_id: stable id of the source row + render settings + history mode.
        lane: the sample this chain follows (0 for ``n == 1``; sample ``s`` continues lane ``s``).
        turn_index: 0 for the first generated assistant turn, then 1, 2, ...
        mode: one of :data:`HISTORY_MODES`.
        max_turns: the conversation ends (``max_turns``) once this many turns are generated.
        source_messages: the source row's canonical messages (its own assistant turns included:
            they locate the cached tool results and the next user turn).
        tools: the source row's tools, forwarded to the chat template.
        template_kwargs: the chat-template kwargs the prompts are rendered with.
        position: index in ``source_messages`` of the assistant turn this prompt generates
            (``len(source_messages)`` when the source ends on a user or tool message).
        history: ``rerender``: the messages sent in this prompt, regenerated assistant messages
            included; ``tokens``: empty (the prompt's ids are the history).
        tool_format: the tool-call format the producer chose (``--tool-format``, or what ``auto``
            found in the tokenizer); empty when it left the choice to the converse stage.
        history_len: ``tokens``: how many leading ids of this prompt are the lane's previous turn
            (its prompt + output), so its hidden states need storing only past them; 0 otherwise.
    """

    conversation_id: str
    lane: int
    turn_index: int
    mode: str
    max_turns: int
    source_messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    position: int
    history: list[dict[str, Any]] = field(default_factory=list)
    tool_format: str = ""
    history_len: int = 0

    def to_json(self) -> str:
        """The JSON a record carries (no spaces, non-ASCII kept), every dict's keys in their own order.

        Not sorted: the chat template renders ``tools``, messages and call arguments with ``tojson``
        in the order their dicts hold, so a reordered dict would render (and tokenize) differently
        at the next turn than at the first. The same state object always gives the same text.
        """
        # A shallow dict: json.dumps walks the nested messages itself (asdict would deep-copy them first).
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ConversationState:
        """The state :meth:`to_json` wrote; keys this version does not know are ignored.

        A later version may add a field: an older stage still continues the conversation (without
        it) rather than dead-lettering every turn during a rolling upgrade.

        Raises:
            ValueError: when ``text`` is not such a state (bad JSON, missing or mistyped fields).
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"conversation state is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError("conversation state must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            state = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise ValueError(f"conversation state has wrong fields: {exc}") from exc
        _check_types(state)
        return state


@dataclass(frozen=True)
class NextPrompt:
    """The next prompt of a conversation: its state and its exact input ids."""

    state: ConversationState
    input_ids: list[int]


@dataclass(frozen=True)
class Ended:
    """A conversation (lane) that has no next prompt.

    Attributes:
        outcome: ``complete`` (the user turns ran out) or ``truncated``.
        reason: a stable code from :data:`eaglefeed.chat.conversation.reasons.REASONS`.
        turns_done: how many assistant turns of this lane were generated.
        detail: one human line on why (not a label: free text, may be empty).
    """

    outcome: str
    reason: str
    turns_done: int
    detail: str = ""


def _check_types(state: ConversationState) -> None:
    ints = (state.lane, state.turn_index, state.max_turns, state.position)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
        raise ValueError("conversation state: lane, turn_index, max_turns and position must be integers")
    if not isinstance(state.conversation_id, str) or state.mode not in HISTORY_MODES:
        raise ValueError(f"conversation state: bad id or mode {state.mode!r}")
    messages = state.source_messages
    if not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
        raise ValueError("conversation state: source_messages must be a list of objects")
    if not (isinstance(state.history, list) and all(isinstance(m, dict) for m in state.history)):
        raise ValueError("conversation state: history must be a list of objects")
    if state.tools is not None and not isinstance(state.tools, list):
        raise ValueError("conversation state: tools must be a list or null")
    if not isinstance(state.template_kwargs, dict):
        raise ValueError("conversation state: template_kwargs must be an object")
    if not isinstance(state.tool_format, str):
        raise ValueError("conversation state: tool_format must be a string")
    if type(state.history_len) is not int or state.history_len < 0:
        raise ValueError("conversation state: history_len must be a count from 0")
