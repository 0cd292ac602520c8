"""Deterministic ids: a replayed step computes the same ids, so it adds nothing downstream."""

from __future__ import annotations

import hashlib

from eaglefeed.chat.prompts import Conversation, canonical_json
from eaglefeed.core.errors import InputError


def conversation_id(conv: Conversation, *, settings_json: str, mode: str,
                    keep_duplicates: bool = False) -> str:
    """Stable id of one source row regenerated with these render settings in this history mode.

    The first 32 hex digits of the sha256 of the canonical JSON of ``{"messages", "mode",
    "settings", "template_kwargs", "tools"}`` (``settings_json`` already canonical, as for
    :func:`eaglefeed.chat.prompts.prompt_id_from_json`); with ``keep_duplicates`` the row's id
    joins it as ``"source_id"``, so identical conversations of distinct rows stay apart.

    Raises:
        InputError: ``invalid_utf8`` when a string holds a lone surrogate.
    """
    canonical = ('{"messages":' + canonical_json(conv.messages) + ',"mode":' + canonical_json(mode)
                 + ',"settings":' + settings_json
                 + (',"source_id":' + canonical_json(conv.row_id) if keep_duplicates else "")
                 + ',"template_kwargs":' + canonical_json(conv.template_kwargs)
                 + ',"tools":' + canonical_json(conv.tools) + "}")
    return _digest(canonical)


def turn_prompt_id(conversation_id: str, turn_index: int, lane: int) -> str:
    """Stable prompt id of turn ``turn_index`` of lane ``lane`` (32 hex digits)."""
    return _digest(canonical_json({"conversation": conversation_id, "lane": lane, "turn": turn_index}))


def _digest(text: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError("invalid_utf8", f"the row holds a lone surrogate: {exc}") from exc
    return hashlib.sha256(data).hexdigest()[:32]
