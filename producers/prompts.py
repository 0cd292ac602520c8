"""Source rows → canonical conversations → rendered, tokenized prompts. No Kafka here.

Accepted rows: OpenAI ``{"messages": [...], "tools": [...]}`` or ShareGPT
``{"conversations": [{"from": ..., "value": ...}]}``, each with optional ``id``,
``sampling_params`` and ``chat_template_kwargs`` overrides.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.errors import InputError

SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
}
OPENAI_ROLES = frozenset({"system", "user", "assistant", "tool"})
SAMPLING_KEYS = frozenset({"max_new_tokens", "temperature", "top_p", "top_k", "min_p",
                           "stop_token_ids", "seed"})


@dataclass(frozen=True)
class Conversation:
    """One source row in canonical OpenAI form."""

    row_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    sampling_overrides: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PromptTurn:
    """The messages the model sees before it writes assistant turn ``turn_index``."""

    turn_index: int
    messages: list[dict[str, Any]]


def parse_row(row: object, *, default_id: str) -> Conversation:
    """Validate one decoded JSON row and bring it to canonical OpenAI form.

    Args:
        row: the decoded JSON value of one line.
        default_id: the row id to use when the row has no ``id`` (e.g. its line number).

    Raises:
        InputError: with a reason code when the row cannot become a prompt.
    """
    if not isinstance(row, Mapping):
        raise InputError("wrong_type", f"a row must be a JSON object, not {type(row).__name__}")
    if "messages" in row:
        messages = _openai_messages(row["messages"])
    elif "conversations" in row:
        messages = _sharegpt_messages(row["conversations"])
    else:
        raise InputError("no_messages", "a row needs 'messages' (OpenAI) or 'conversations' (ShareGPT)")
    tools = row.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools)):
        raise InputError("wrong_type", "'tools' must be a list of objects")
    row_id = row.get("id", default_id)
    if not isinstance(row_id, (str, int)) or isinstance(row_id, bool):
        raise InputError("wrong_type", "'id' must be a string or an integer")
    return Conversation(
        row_id=str(row_id),
        messages=messages,
        tools=[dict(t) for t in tools] if tools else None,
        sampling_overrides=_object(row, "sampling_params", allowed=SAMPLING_KEYS),
        template_kwargs=_object(row, "chat_template_kwargs"),
    )


def last_turn(conv: Conversation) -> PromptTurn:
    """The conversation up to its last user (or tool) message; a trailing assistant turn is dropped.

    Raises:
        InputError: ``no_user_turn`` when nothing is left for the model to answer.
    """
    messages = conv.messages
    end = len(messages)
    while end and messages[end - 1]["role"] == "assistant":
        end -= 1
    if end == 0 or messages[end - 1]["role"] not in ("user", "tool"):
        raise InputError("no_user_turn", "the conversation has no user turn to answer")
    prefix = messages[:end]
    turn_index = sum(1 for m in prefix if m["role"] == "assistant")
    return PromptTurn(turn_index=turn_index, messages=prefix)


def prompt_id(turn: PromptTurn, *, tools: Sequence[Mapping[str, Any]] | None,
              render_settings: Mapping[str, Any]) -> str:
    """A stable id: the same conversation, turn and settings always give the same id."""
    canonical = json.dumps(
        {"messages": turn.messages, "tools": tools, "turn": turn.turn_index, "settings": render_settings},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _openai_messages(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise InputError("wrong_type", "'messages' must be a list")
    if not raw:
        raise InputError("empty_conversation", "'messages' is empty")
    out = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, Mapping):
            raise InputError("wrong_type", f"message {i} is not an object")
        role = msg.get("role")
        if role not in OPENAI_ROLES:
            raise InputError("unknown_role", f"message {i} has unknown role {role!r}")
        out.append(_clean_message(dict(msg), i))
    return out


def _sharegpt_messages(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise InputError("wrong_type", "'conversations' must be a list")
    if not raw:
        raise InputError("empty_conversation", "'conversations' is empty")
    out = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, Mapping):
            raise InputError("wrong_type", f"turn {i} is not an object")
        speaker = turn.get("from")
        role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise InputError("unknown_role", f"turn {i} has unknown speaker {speaker!r}")
        out.append(_clean_message({"role": role, "content": turn.get("value")}, i))
    return out


def _clean_message(msg: dict[str, Any], i: int) -> dict[str, Any]:
    content = msg.get("content")
    if content is None:
        msg["content"] = ""
    elif not isinstance(content, str):
        raise InputError("wrong_type", f"message {i} content must be a string")
    if msg["role"] != "assistant" and msg.get("tool_calls"):
        raise InputError("wrong_type", f"message {i}: only assistant messages carry tool_calls")
    if "tool_calls" in msg:
        msg["tool_calls"] = _tool_calls(msg["tool_calls"], i)
    reasoning = msg.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise InputError("wrong_type", f"message {i} reasoning_content must be a string")
    return msg


def _tool_calls(calls: object, i: int) -> list[dict[str, Any]]:
    # As SGLang's chat endpoint does, JSON-string arguments become objects before rendering.
    if not isinstance(calls, list):
        raise InputError("wrong_type", f"message {i} tool_calls must be a list")
    out = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            raise InputError("wrong_type", f"message {i} has a tool call without a function")
        call = copy.deepcopy(dict(call))
        fn = call["function"]
        if not isinstance(fn.get("name"), str):
            raise InputError("wrong_type", f"message {i} has a tool call without a name")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise InputError("wrong_type", f"message {i} tool call arguments are not JSON") from exc
        fn["arguments"] = args
        out.append(call)
    return out


def _object(row: Mapping[str, Any], key: str, allowed: frozenset[str] | None = None) -> dict[str, Any]:
    value = row.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError("wrong_type", f"'{key}' must be an object")
    if allowed is not None and (unknown := set(value) - allowed):
        raise InputError("wrong_type", f"'{key}' has unknown keys {sorted(unknown)}")
    return dict(value)
