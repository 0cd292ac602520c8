"""The status figures of regenerated conversations: one entry per lane, whatever repeats."""

from eaglefeed.ops.conversation_status import ConversationTally
from eaglefeed.schemas import CONVERSATION_EVENT
from eaglefeed.schemas.conversation_events import conversation_event, event_identity


def event(cid, lane, kind, turn, outcome="", reason="", lanes=1):
    _, value = conversation_event(conversation_id=cid, lane=lane, event=kind, turn_index=turn,
                                  history_mode="tokens", outcome=outcome, reason=reason, lanes=lanes)
    return CONVERSATION_EVENT.decode(value)


def test_lanes_turns_and_ends_are_counted_once_each():
    tally = ConversationTally()
    stream = [event("a", -1, "started", 0, lanes=2), event("b", -1, "started", 0),
              event("a", 0, "turn", 1), event("a", 1, "turn", 1), event("a", 0, "turn", 2),
              event("a", 0, "ended", 3, "complete", "user_turns_done"),
              event("a", 1, "ended", 1, "truncated", "tool_call_mismatch"),
              event("b", 0, "turn", 1)]
    for e in stream + stream[2:6]:  # a converse replay repeats some events
        tally.add(e)
    view = tally.view()
    assert (view.conversations, view.lanes, view.in_progress, view.turns_done) == (2, 3, 1, 3 + 1 + 1)
    assert view.ended == {"complete": 1, "truncated": 1} and view.truncated == {"tool_call_mismatch": 1}
    assert view.lines()[0] == ("conversations: 2 started (3 lanes): 1 in progress, 1 complete, 1 truncated, "
                               "0 dead_letter; 5 turns done")
    assert view.lines()[1] == "  truncated: tool_call_mismatch=1"


def test_a_real_end_replaces_a_dead_letter_end_after_a_redrive():
    tally = ConversationTally()
    for e in (event("a", -1, "started", 0), event("a", 0, "ended", 0, "dead_letter", "http_503"),
              event("a", 0, "turn", 1), event("a", 0, "ended", 2, "complete", "user_turns_done"),
              event("a", 0, "ended", 0, "dead_letter", "http_503")):
        tally.add(e)
    view = tally.view()
    assert view.ended == {"complete": 1} and view.dead_lettered == {} and view.turns_done == 2


def test_events_are_keyed_by_lane_and_identified_by_kind_and_turn():
    key, _ = conversation_event(conversation_id="c", lane=2, event="turn", turn_index=3,
                                history_mode="rerender")
    assert key == b"c:2"
    assert event_identity(event("c", 2, "turn", 3)) == ("c", 2, "turn", 3)
