"""The conversation step: the first prompt of a conversation, and the prompt after each turn.

Pure functions (no Kafka, no clock): the same inputs give the same prompt ids and state, so a
stage that replays a step after a crash republishes exactly what it published before.

Order of checks after a turn: a ``length`` (or other non-``stop``) finish ends the lane; then the
output is split and its calls parsed (``tool_call_*``); a lane with no call and nothing left to
answer is ``complete``; a lane at ``max_turns`` ends there; then calls are paired with cached
results; then the next prompt is built (``template_error``, ``not_prefix_stable``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eaglefeed.chat.conversation import reasons
from eaglefeed.chat.conversation.markers import SplitMarkers, split_markers_for
from eaglefeed.chat.conversation.split import CONTENT, REASONING, OutputSplit, split_output
from eaglefeed.chat.conversation.state import HISTORY_MODES, ConversationState, Ended, NextPrompt
from eaglefeed.chat.conversation.suffix import NotPrefixStable, token_suffix
from eaglefeed.chat.conversation.toolcalls import FORMATS, ParsedContent, ToolCallError, parse_content
from eaglefeed.chat.conversation.walk import (
    Following,
    PairingError,
    first_prompt_end,
    following,
    pair_results,
)
from eaglefeed.chat.prompts import Conversation
from eaglefeed.chat.render import PromptRenderer
from eaglefeed.core.errors import InputError

Message = dict[str, Any]


def start(conv: Conversation, *, mode: str, max_turns: int, lane: int, renderer: PromptRenderer,
          conversation_id: str, input_ids: list[int] | None = None,
          tool_format: str = "") -> NextPrompt | Ended:
    """The prompt of turn 0: the source up to its first assistant turn after the first user message.

    System messages are kept. Leading assistant messages (before any user message) cannot be
    regenerated from a user turn: such a row is an input error, as in the reference tools.

    Args:
        conv: the parsed source row.
        mode: one of ``HISTORY_MODES``.
        max_turns: at most this many assistant turns are generated (>= 1).
        lane: the sample chain (0 unless ``n > 1``).
        renderer: renders messages with the target's chat template.
        conversation_id: from :func:`eaglefeed.chat.conversation.ids.conversation_id`.
        input_ids: the ids of :func:`first_messages` already rendered by ``renderer`` (e.g. in a
            batch with ``render_many``, which the renderer's probe holds to the exact path's ids);
            rendered here when None.
        tool_format: the tool-call format the lane's turns are parsed with (kept in the state;
            empty: the converse stage chooses).

    Returns:
        the first prompt, or ``Ended("truncated", "template_error")`` when the template rejects it.

    Raises:
        InputError: ``no_user_turn`` when the row has no user message, ``assistant_first`` when an
            assistant message comes before the first user message.
        ValueError: for an unknown ``mode`` or ``max_turns < 1`` (a caller's bug, not a row's).
    """
    if mode not in HISTORY_MODES:
        raise ValueError(f"unknown history mode {mode!r}; expected one of {', '.join(HISTORY_MODES)}")
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    source = [dict(m) for m in conv.messages]
    end = _first_end(source)
    messages = source[:end]
    state = ConversationState(
        conversation_id=conversation_id, lane=lane, turn_index=0, mode=mode, max_turns=max_turns,
        source_messages=source, tools=conv.tools, template_kwargs=dict(conv.template_kwargs),
        position=end, history=messages if mode == "rerender" else [], tool_format=tool_format)
    if input_ids is not None:
        return NextPrompt(state=state, input_ids=list(input_ids))
    try:
        ids = renderer.render(messages, tools=conv.tools, template_kwargs=conv.template_kwargs)
    except InputError as exc:
        return Ended(reasons.TRUNCATED, reasons.TEMPLATE_ERROR, 0, str(exc))
    return NextPrompt(state=state, input_ids=ids)


def first_messages(conv: Conversation) -> list[Message]:
    """The messages of a conversation's first prompt (what :func:`start` renders).

    Raises:
        InputError: ``no_user_turn`` or ``assistant_first``, as :func:`start` does.
    """
    source = [dict(m) for m in conv.messages]
    return source[:_first_end(source)]


def continue_after(state: ConversationState, *, prompt_ids: list[int], output_ids: list[int],
                   finish_reason: str, renderer: PromptRenderer,
                   tool_format: str = "hermes") -> NextPrompt | Ended:
    """The next prompt of this lane after the turn ``state`` describes was generated.

    Args:
        state: the state that came with the prompt.
        prompt_ids: the exact ids of that prompt.
        output_ids: the exact ids the engine returned (stop token included, as SGLang returns it).
        finish_reason: the engine's finish reason (``stop``, ``length``, ``abort``).
        renderer: renders messages with the target's chat template.
        tool_format: the named tool-call format (``eaglefeed.chat.toolcalls.FORMATS``).

    Returns:
        ``NextPrompt`` for turn ``state.turn_index + 1``, or ``Ended`` with a stable reason.
    """
    done = state.turn_index + 1
    if finish_reason == "length":
        return _truncated(reasons.LENGTH, done, "the turn hit max_new_tokens")
    if finish_reason != "stop":
        return _truncated(reasons.UNKNOWN_FINISH, done, f"finish_reason {finish_reason!r}")
    if tool_format not in FORMATS:
        return _truncated(reasons.TOOL_CALL_UNKNOWN_FORMAT, done, f"no tool-call format {tool_format!r}")
    tokenizer = renderer.tokenizer
    markers = split_markers_for(tokenizer)
    split = split_output(output_ids, markers)
    try:
        parsed = parse_content(split.ids_of(CONTENT), markers, _decoder(tokenizer), tool_format, state.tools)
    except ToolCallError as exc:
        return _truncated(reasons.TOOL_CALL_UNPARSABLE, done, str(exc))
    after = following(state.source_messages, state.position)
    if not parsed.calls and not after.answerable:
        return Ended(reasons.COMPLETE, reasons.USER_TURNS_DONE, done)
    if done >= state.max_turns:
        return _truncated(reasons.MAX_TURNS, done, f"{done} turns generated")
    try:
        calls = pair_results(state.source_messages, state.position, after, parsed.calls)
    except PairingError as exc:
        return _truncated(exc.reason, done, str(exc))
    if state.mode == "rerender":
        return _rerender(state, split, parsed, calls, after, renderer)
    return _tokens(state, prompt_ids, output_ids, markers, calls, after, renderer)


def assistant_message(split: OutputSplit, parsed: ParsedContent, calls: list[Message],
                      decode: Any) -> Message:
    """The turn as the assistant message a chat client sends back (what the server's parsers give).

    ``content`` is the text outside the calls and ``reasoning_content`` the think block's text
    (present only when the turn had a think marker), both stripped of surrounding whitespace.
    """
    message: Message = {"role": "assistant", "content": parsed.text}
    if split.has_think:
        message["reasoning_content"] = decode(split.ids_of(REASONING)).strip()
    if calls:
        message["tool_calls"] = calls
    return message


def _rerender(state: ConversationState, split: OutputSplit, parsed: ParsedContent, calls: list[Message],
              after: Following, renderer: PromptRenderer) -> NextPrompt | Ended:
    done = state.turn_index + 1
    history = [*state.history, assistant_message(split, parsed, calls, _decoder(renderer.tokenizer)),
               *after.messages]
    try:
        ids = renderer.render(history, tools=state.tools, template_kwargs=state.template_kwargs)
    except InputError as exc:
        return _truncated(reasons.TEMPLATE_ERROR, done, str(exc))
    return NextPrompt(state=_advance(state, after.next_position, history), input_ids=ids)


def _tokens(state: ConversationState, prompt_ids: list[int], output_ids: list[int], markers: SplitMarkers,
            calls: list[Message], after: Following, renderer: PromptRenderer) -> NextPrompt | Ended:
    done = state.turn_index + 1
    tokenizer = renderer.tokenizer

    def render_text(messages: list[Message], generation_prompt: bool) -> str:
        tools: Any = state.tools
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=generation_prompt, **state.template_kwargs)
        return str(text)

    def tokenize(text: str) -> list[int]:
        # What apply_chat_template(tokenize=True) does with the rendered text.
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    # The template sees the source's history before this turn (its own turns, not the
    # regenerated ones): only what it renders after the turn is used, and that is checked.
    context = state.source_messages[:state.position]
    try:
        suffix = token_suffix(context=context, tool_calls=calls, following=after.messages,
                              output_ids=output_ids, markers=markers, render_text=render_text,
                              tokenize=tokenize)
    except NotPrefixStable as exc:
        return _truncated(reasons.NOT_PREFIX_STABLE, done, str(exc))
    except Exception as exc:  # noqa: BLE001 - any template failure ends the lane, not the stage
        return _truncated(reasons.TEMPLATE_ERROR, done, f"the chat template failed: {exc}")
    next_ids = [*prompt_ids, *output_ids, *suffix]
    advanced = dataclasses.replace(_advance(state, after.next_position, []),
                                   history_len=len(prompt_ids) + len(output_ids))
    return NextPrompt(state=advanced, input_ids=next_ids)


def _first_end(source: list[Message]) -> int:
    try:
        return first_prompt_end(source)
    except LookupError as exc:
        reason = str(exc.args[0])
        text = ("the conversation has no user turn to answer" if reason == "no_user_turn"
                else "an assistant message comes before the first user message")
        raise InputError(reason, text) from None


def _advance(state: ConversationState, position: int, history: list[Message]) -> ConversationState:
    return dataclasses.replace(state, turn_index=state.turn_index + 1, position=position, history=history)


def _decoder(tokenizer: Any) -> Any:
    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    return decode


def _truncated(reason: str, done: int, detail: str) -> Ended:
    return Ended(reasons.TRUNCATED, reason, done, detail)
