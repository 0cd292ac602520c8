"""Where a conversation stands in its source row: what follows a generated turn, and pairing.

The source row's own assistant turns are never history here; they only tell where the next
user turn is and which tool results were cached for the calls the source made.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eaglefeed.chat.conversation import reasons
from eaglefeed.chat.conversation.toolcalls import ToolCall

Message = dict[str, Any]


class PairingError(ValueError):
    """Regenerated calls and cached results do not pair; ``reason`` is a stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Following:
    """The source messages after a generated turn, up to the next assistant turn.

    Attributes:
        messages: the following messages (cached tool results first, then system/user messages).
        next_position: index in the source of the next assistant turn (or the source's length).
        answerable: whether they hold a user or tool message, i.e. whether there is a next turn.
    """

    messages: list[Message]
    next_position: int
    answerable: bool


def first_prompt_end(source: list[Message]) -> int:
    """Index of the first assistant message after the first user message (or ``len(source)``).

    Raises:
        LookupError: ``no_user_turn`` when there is no user message; ``assistant_first`` when an
            assistant message comes before it.
    """
    for i, message in enumerate(source):
        if message["role"] == "assistant":
            raise LookupError("assistant_first")
        if message["role"] == "user":
            return _next_assistant(source, i + 1)
    raise LookupError("no_user_turn")


def following(source: list[Message], position: int) -> Following:
    """The messages after the assistant turn at ``position`` (the source's own turn skipped)."""
    start = position
    while start < len(source) and source[start]["role"] == "assistant":
        start += 1
    end = _next_assistant(source, start)
    messages = [dict(m) for m in source[start:end]]
    answerable = any(m["role"] in ("user", "tool") for m in messages)
    return Following(messages=messages, next_position=end, answerable=answerable)


def pair_results(source: list[Message], position: int, after: Following,
                 calls: list[ToolCall]) -> list[Message]:
    """The regenerated calls as OpenAI ``tool_calls``, the k-th paired with the k-th cached result.

    N calls of one turn (parallel calls) pair in order with the N cached ``tool`` results that
    follow the turn. The name must match when the cached side tells it: the tool message's
    ``name``, else the source call its ``tool_call_id`` names, else the source's k-th call.

    Raises:
        PairingError: ``tool_call_without_result`` (calls but no cached result),
            ``tool_result_without_call`` (cached results but no call) or ``tool_call_mismatch``
            (as many calls as results but a name differs, or a different number of each).
    """
    results = _leading_tools(after.messages)
    if not calls:
        if results:
            raise PairingError(reasons.TOOL_RESULT_WITHOUT_CALL,
                               f"{len(results)} cached tool result(s) but the turn made no call")
        return []
    called = _names(c.name for c in calls)
    if not results:
        raise PairingError(reasons.TOOL_CALL_WITHOUT_RESULT,
                           f"the turn called {called} but the source has no cached result")
    source_calls = _source_calls(source, position)
    cached = [_cached_name(result, source_calls, k) for k, result in enumerate(results)]
    if len(results) != len(calls):
        raise PairingError(reasons.TOOL_CALL_MISMATCH,
                           f"the turn made {len(calls)} call(s) {called} but the source "
                           f"has {len(results)} cached result(s) {_names(cached)}")
    out = []
    for k, call in enumerate(calls):
        if cached[k] is not None and cached[k] != call.name:
            raise PairingError(reasons.TOOL_CALL_MISMATCH,
                               f"call {k} of {len(calls)} is {call.name!r} but cached result {k} is for "
                               f"{cached[k]!r}")
        entry: Message = {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        call_id = results[k].get("tool_call_id")
        if isinstance(call_id, str):
            entry["id"] = call_id  # the cached result keeps pointing at its call
        out.append(entry)
    return out


def _next_assistant(source: list[Message], start: int) -> int:
    for i in range(start, len(source)):
        if source[i]["role"] == "assistant":
            return i
    return len(source)


def _leading_tools(messages: list[Message]) -> list[Message]:
    out = []
    for message in messages:
        if message["role"] != "tool":
            break
        out.append(message)
    return out


def _source_calls(source: list[Message], position: int) -> list[Message]:
    calls: list[Message] = []
    i = position
    while i < len(source) and source[i]["role"] == "assistant":
        calls.extend(c for c in source[i].get("tool_calls") or [] if isinstance(c, dict))
        i += 1
    return calls


def _cached_name(result: Message, source_calls: list[Message], k: int) -> str | None:
    name = result.get("name")
    if isinstance(name, str) and name:
        return name
    call_id = result.get("tool_call_id")
    if isinstance(call_id, str):
        for call in source_calls:
            if call.get("id") == call_id:
                return _call_name(call)
    if k < len(source_calls):
        return _call_name(source_calls[k])
    return None


def _names(names: Iterable[str | None]) -> str:
    return "[" + ", ".join("?" if n is None else repr(n) for n in names) + "]"


def _call_name(call: Message) -> str | None:
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None
