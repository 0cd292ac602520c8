"""ConversationEvents on ``<prefix>.conversations``: the life of every regenerated conversation.

The producer writes ``started`` when it publishes a conversation's turn-0 prompt; the converse
stage writes ``turn`` when it publishes a next-turn prompt and ``ended`` when a lane ends
(complete, truncated with a reason, or dead_letter). A replay after a crash may write an event
twice: readers count distinct events (:func:`event_identity`), never messages.
"""

from __future__ import annotations

import time
from typing import Any

from eaglefeed.schemas import CONVERSATION_EVENT

EVENTS = ("started", "turn", "ended")
ENDED_OUTCOMES = ("complete", "truncated", "dead_letter")
TURN_ZERO_LANE = -1  # the turn-0 prompt is shared by every lane (num_samples = n)


def conversation_event(*, conversation_id: str, lane: int, event: str, turn_index: int, history_mode: str,
                       source: str = "", source_row: str = "", outcome: str = "", reason: str = "",
                       lanes: int = 1) -> tuple[bytes, bytes]:
    """An encoded ConversationEvent and its key (``conversation_id:lane``).

    Args:
        conversation_id: the conversation's stable id.
        lane: the sample chain, or :data:`TURN_ZERO_LANE` for ``started``.
        event: one of :data:`EVENTS`.
        turn_index: started: 0; turn: the turn whose prompt was published; ended: turns generated.
        history_mode: ``rerender`` or ``tokens``.
        source: the input file.
        source_row: the row's id in it.
        outcome: ended only: one of :data:`ENDED_OUTCOMES`.
        reason: ended only: a stable reason code.
        lanes: started only: how many lanes (samples) the conversation branches into.

    Raises:
        ValueError: an unknown event or outcome (a caller's bug).
    """
    wrong_outcome = (event == "ended") != bool(outcome) or (outcome and outcome not in ENDED_OUTCOMES)
    if event not in EVENTS or wrong_outcome:
        raise ValueError(f"bad conversation event {event!r} with outcome {outcome!r}")
    value = CONVERSATION_EVENT.encode({
        "conversation_id": conversation_id, "lane": lane, "event": event, "turn_index": turn_index,
        "outcome": outcome, "reason": reason, "lanes": lanes, "history_mode": history_mode,
        "source": source, "source_row": source_row, "created_at": int(time.time() * 1000),
    })
    return f"{conversation_id}:{lane}".encode(), value


def event_identity(event: dict[str, Any]) -> tuple[str, int, str, int]:
    """What makes two events the same event (a replay repeats it): id, lane, kind and turn."""
    return event["conversation_id"], event["lane"], event["event"], event["turn_index"]
