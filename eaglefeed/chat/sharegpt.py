"""ShareGPT ``conversations`` (``from``/``value``) → OpenAI-style messages.

Speakers map to roles: ``human``/``user`` → user, ``gpt``/``assistant``/``model`` → assistant,
``system`` → system, ``tool``/``function``/``observation`` → tool. A ``function_call`` turn
(LLaMA-Factory style, the value is a JSON call or a list of calls) becomes an assistant message
with ``tool_calls``. A row-level ``system`` string becomes the first message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from eaglefeed.core.errors import InputError

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
FUNCTION_CALL = "function_call"


def sharegpt_messages(raw: object, system: object = None) -> list[dict[str, Any]]:
    """Map ShareGPT turns to OpenAI messages; ``canonical_messages`` validates the result.

    Args:
        raw: the row's ``conversations`` value.
        system: the row's optional top-level ``system`` prompt.

    Raises:
        InputError: ``wrong_type``, ``empty_conversation`` or ``unknown_role``.
    """
    if not isinstance(raw, list):
        raise InputError("wrong_type", "'conversations' must be a list")
    if not raw:
        raise InputError("empty_conversation", "'conversations' is empty")
    out: list[dict[str, Any]] = []
    if system is not None:
        if not isinstance(system, str):
            raise InputError("wrong_type", "'system' must be a string")
        if system:
            out.append({"role": "system", "content": system})
    for i, turn in enumerate(raw):
        if not isinstance(turn, Mapping):
            raise InputError("wrong_type", f"turn {i} is not an object")
        speaker = turn.get("from")
        if speaker == FUNCTION_CALL:
            out.append({"role": "assistant", "content": "", "tool_calls": _calls(turn.get("value"), i)})
            continue
        role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise InputError("unknown_role", f"turn {i} has unknown speaker {speaker!r}")
        if role == "system" and out and out[0]["role"] == "system" and i == 0:
            out.pop(0)  # the turn's own system prompt wins over the row-level one
        out.append({"role": role, "content": turn.get("value")})
    return out


def _calls(value: object, i: int) -> list[dict[str, Any]]:
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError("wrong_type", f"turn {i}: a function_call value must be JSON") from exc
    if isinstance(calls, Mapping):
        calls = [calls]
    if not isinstance(calls, list) or not calls:
        raise InputError("wrong_type", f"turn {i}: a function_call value must be a call or a list of calls")
    out = []
    for call in calls:
        if not isinstance(call, Mapping):
            raise InputError("wrong_type", f"turn {i}: a function call must be an object")
        out.append({"type": "function",
                    "function": {"name": call.get("name"), "arguments": call.get("arguments", {})}})
    return out
