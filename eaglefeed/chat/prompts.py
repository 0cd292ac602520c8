"""Source rows → canonical conversations → the turns to generate, with stable ids. No Kafka here.

Accepted rows: OpenAI ``{"messages": [...], "tools": [...]}`` or ShareGPT
``{"conversations": [{"from": ..., "value": ...}]}`` (see ``eaglefeed.chat.sharegpt``), each with
optional ``id``, ``sampling_params`` and ``chat_template_kwargs`` overrides. ``tools`` and
``chat_template_kwargs`` may also be JSON strings, as Parquet datasets often store them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.chat.sampling import check_sampling
from eaglefeed.chat.sharegpt import sharegpt_messages
from eaglefeed.core.errors import InputError

OPENAI_ROLES = frozenset({"system", "user", "assistant", "tool"})
ANSWERED_ROLES = ("user", "tool")  # a generation prompt follows one of these


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
    """Validate one decoded row and bring it to canonical OpenAI form.

    Args:
        row: the decoded value of one line, array element or Parquet row.
        default_id: the row id to use when the row has no ``id`` (e.g. its line number).

    Raises:
        InputError: with a reason code when the row cannot become a prompt.
    """
    if not isinstance(row, Mapping):
        raise InputError("wrong_type", f"a row must be a JSON object, not {type(row).__name__}")
    if row.get("messages") is not None:
        messages = canonical_messages(row["messages"], "messages")
    elif row.get("conversations") is not None:
        messages = canonical_messages(sharegpt_messages(row["conversations"], row.get("system")),
                                      "conversations")
    else:
        raise InputError("no_messages", "a row needs 'messages' (OpenAI) or 'conversations' (ShareGPT)")
    tools = json_field(row, "tools", list)
    if tools is not None and not all(isinstance(t, Mapping) for t in tools):
        raise InputError("wrong_type", "'tools' must be a list of objects")
    row_id = row.get("id")
    if row_id is None:
        row_id = default_id
    if not isinstance(row_id, (str, int)) or isinstance(row_id, bool):
        raise InputError("wrong_type", "'id' must be a string or an integer")
    row_id = str(row_id)
    if not is_utf8(row_id):
        raise InputError("invalid_utf8", "'id' holds a lone surrogate")
    sampling = json_field(row, "sampling_params", dict)
    return Conversation(
        row_id=row_id,
        messages=messages,
        tools=[dict(t) for t in tools] if tools else None,
        sampling_overrides=check_sampling(sampling) if sampling else {},
        template_kwargs=json_field(row, "chat_template_kwargs", dict) or {},
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
    if end == 0 or messages[end - 1]["role"] not in ANSWERED_ROLES:
        raise InputError("no_user_turn", "the conversation has no user turn to answer")
    prefix = messages[:end]
    turn_index = sum(1 for m in prefix if m["role"] == "assistant")
    return PromptTurn(turn_index=turn_index, messages=prefix)


def all_turns(conv: Conversation) -> list[PromptTurn]:
    """One prompt per assistant answer.

    That is the history before each assistant message that follows a user or tool message, plus
    the whole conversation when it ends on a user or tool message.

    Earlier assistant turns stay in the history as they are; the chat template renders them as it
    renders history (dropping earlier reasoning, for example).

    Raises:
        InputError: ``no_user_turn`` when no assistant turn follows a user or tool message.
    """
    messages = conv.messages
    turns = []
    answered = 0
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            if i and messages[i - 1]["role"] in ANSWERED_ROLES:
                turns.append(PromptTurn(turn_index=answered, messages=messages[:i]))
            answered += 1
    if messages[-1]["role"] in ANSWERED_ROLES:
        turns.append(PromptTurn(turn_index=answered, messages=messages))
    if not turns:
        raise InputError("no_user_turn", "the conversation has no user turn to answer")
    return turns


def prompt_id_from_json(turn: PromptTurn, *, tools_json: str, settings_json: str,
                        source_id: str | None = None) -> str:
    """A stable id: the same conversation, turn and settings always give the same id.

    It is the first 32 hex digits of the sha256 of the canonical JSON (sorted keys, no spaces) of
    ``{"messages", "settings", "tools", "turn"}``; the tools and the render settings come already
    in canonical JSON (:func:`canonical_json`), as the rows of one file share them. So identical
    prompts are one prompt whatever their rows' ids, unless ``source_id`` (``produce
    --keep-duplicates``: the row's id) joins the JSON as ``"source_id"``; without it the id is
    the same as before that option existed.

    Raises:
        InputError: ``invalid_utf8`` when a string holds a lone surrogate (it cannot be published).
    """
    source = "" if source_id is None else ',"source_id":' + canonical_json(source_id)
    canonical = ('{"messages":' + canonical_json(turn.messages) + ',"settings":' + settings_json
                 + source + ',"tools":' + tools_json + ',"turn":' + str(turn.turn_index) + "}")
    try:
        data = canonical.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError("invalid_utf8", f"the row holds a lone surrogate: {exc}") from exc
    return hashlib.sha256(data).hexdigest()[:32]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces, non-ASCII kept as is."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical_messages(raw: object, key: str) -> list[dict[str, Any]]:
    """Validate OpenAI-style messages: known roles, text content, well-formed tool calls.

    Keys whose value is null are dropped (as transformers does before rendering), so a row read
    from Parquet, where absent struct fields are null, gets the same prompt id as its JSON twin.
    """
    if not isinstance(raw, list):
        raise InputError("wrong_type", f"'{key}' must be a list")
    if not raw:
        raise InputError("empty_conversation", f"'{key}' is empty")
    out = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, Mapping):
            raise InputError("wrong_type", f"message {i} is not an object")
        role = msg.get("role")
        if role not in OPENAI_ROLES:
            raise InputError("unknown_role", f"message {i} has unknown role {role!r}")
        out.append(_clean_message({k: v for k, v in msg.items() if v is not None}, i))
    return out


def json_field(row: Mapping[str, Any], key: str, kind: type) -> Any:
    """``row[key]`` as a ``kind`` (list or dict), decoding a JSON string; None when absent.

    Raises:
        InputError: ``wrong_type`` when the value is neither a ``kind`` nor JSON of one.
    """
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError("wrong_type", f"'{key}' is a string but not JSON: {exc}") from exc
    if value is None:
        return None
    if not isinstance(value, kind):
        raise InputError("wrong_type", f"'{key}' must be {'a list' if kind is list else 'an object'}")
    return value


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _clean_message(msg: dict[str, Any], i: int) -> dict[str, Any]:
    content = msg.get("content")
    if content is None:
        msg["content"] = ""
    elif isinstance(content, list):
        _check_text_parts(content, i)
    elif not isinstance(content, str):
        raise InputError("wrong_type", f"message {i} content must be a string or a list of text parts")
    if msg["role"] != "assistant" and msg.get("tool_calls"):
        raise InputError("wrong_type", f"message {i}: only assistant messages carry tool_calls")
    if "tool_calls" in msg:
        msg["tool_calls"] = _tool_calls(msg["tool_calls"], i)
    reasoning = msg.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise InputError("wrong_type", f"message {i} reasoning_content must be a string")
    return msg


def _check_text_parts(parts: list[Any], i: int) -> None:
    # The chat template decides how text parts join; images and audio cannot be tokenized here.
    for part in parts:
        if not (isinstance(part, Mapping) and part.get("type") == "text"
                and isinstance(part.get("text"), str)):
            raise InputError("wrong_type",
                             f"message {i} content parts must be {{'type': 'text', 'text': str}}")


def _tool_calls(calls: object, i: int) -> list[dict[str, Any]]:
    # As SGLang's chat endpoint does, JSON-string arguments become objects before rendering.
    if not isinstance(calls, list):
        raise InputError("wrong_type", f"message {i} tool_calls must be a list")
    out = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            raise InputError("wrong_type", f"message {i} has a tool call without a function")
        call = {k: v for k, v in copy.deepcopy(dict(call)).items() if v is not None}
        fn = call["function"] = {k: v for k, v in call["function"].items() if v is not None}
        if not isinstance(fn.get("name"), str):
            raise InputError("wrong_type", f"message {i} has a tool call without a name")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InputError("wrong_type", f"message {i} tool call arguments are not JSON") from exc
        if not isinstance(args, Mapping):
            raise InputError("wrong_type", f"message {i} tool call arguments must be a JSON object")
        fn["arguments"] = args
        out.append(call)
    return out
