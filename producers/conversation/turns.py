"""The conversation step: the first prompt of a conversation, and the prompt after each turn.

Pure functions (no Kafka, no clock): the same inputs give the same prompt ids and state, so a
stage that replays a step after a crash republishes exactly what it published before.
"""

from __future__ import annotations

from producers.conversation.state import ConversationState, Ended, NextPrompt
from producers.prompts import Conversation
from producers.render import PromptRenderer


def start(conv: Conversation, *, mode: str, max_turns: int, lane: int, renderer: PromptRenderer,
          conversation_id: str) -> NextPrompt | Ended:
    """The prompt of turn 0: the source up to and including its first user message.

    System messages before the first user message are kept. Leading assistant messages (before
    any user message) cannot be regenerated from a user turn.

    Args:
        conv: the parsed source row.
        mode: one of ``HISTORY_MODES``.
        max_turns: at most this many assistant turns are generated (>= 1).
        lane: the sample chain (0 unless ``n > 1``).
        renderer: renders messages with the target's chat template.
        conversation_id: from :func:`producers.conversation.ids.conversation_id`.

    Returns:
        the first prompt, or ``Ended("truncated", "template_error")`` when the template rejects it.

    Raises:
        InputError: ``no_user_turn`` when the row has no user message, ``assistant_first`` when an
            assistant message comes before the first user message (as the reference tools do).
        ValueError: for an unknown ``mode`` or ``max_turns < 1`` (a caller's bug, not a row's).
    """
    raise NotImplementedError


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
        tool_format: the named tool-call format (see ``producers.conversation.toolcalls``).

    Returns:
        ``NextPrompt`` for turn ``state.turn_index + 1``, or ``Ended`` with a stable reason.
    """
    raise NotImplementedError
