"""Read ``<prefix>.conversations`` into the figures ``eaglefeed status`` shows for regenerated conversations.

Events may repeat (a converse stage replays after a crash), so the tally keeps one entry per
lane: the newest turn it reached and how it ended. An end other than ``dead_letter`` wins over
a ``dead_letter`` one (a re-driven prompt can carry the lane on to a real end).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import SchemaError
from eaglefeed.core.kafka import make_consumer
from eaglefeed.ops.read_to_end import records_to
from eaglefeed.schemas import CONVERSATION_EVENT

log = logging.getLogger(__name__)

READ_SECONDS = 5.0  # at most this long per refresh; the rest is read at the next one


@dataclass(frozen=True)
class ConversationView:
    """What the conversations topic says so far."""

    conversations: int  # started
    lanes: int  # sample chains of the started conversations
    in_progress: int  # lanes not ended yet
    turns_done: int  # assistant turns generated, over every lane
    ended: dict[str, int] = field(default_factory=dict)  # outcome -> lanes
    truncated: dict[str, int] = field(default_factory=dict)  # reason -> lanes
    dead_lettered: dict[str, int] = field(default_factory=dict)  # reason -> lanes
    next_prompts: int = 0  # next-turn prompts converse published to the prompts topic (its turn events)

    def lines(self) -> list[str]:
        """The status screen's lines about conversations."""
        ended = ", ".join(f"{self.ended.get(k, 0)} {k}" for k in ("complete", "truncated", "dead_letter"))
        out = [f"conversations: {self.conversations} started ({self.lanes} lanes): {self.in_progress} in "
               f"progress, {ended}; {self.turns_done} turns done"]
        for title, counts in (("truncated", self.truncated), ("dead-lettered", self.dead_lettered)):
            if counts:
                out.append(f"  {title}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        return out


class ConversationTally:
    """Fold ConversationEvents (decoded) into a :class:`ConversationView`; repeats count once."""

    def __init__(self) -> None:
        self._lanes: dict[str, int] = {}  # conversation id -> lanes
        self._turns: dict[tuple[str, int], int] = {}  # lane -> newest turn published
        self._ended: dict[tuple[str, int], tuple[str, str, int]] = {}  # lane -> (outcome, reason, turns)
        # Every turn event went out beside one next-turn prompt, repeats too (a replay sends
        # both again): counted as they come, so the producer's share of the prompts topic shows.
        self._turn_events = 0

    def add(self, event: dict[str, Any]) -> None:
        """Take one event into account."""
        cid, lane, kind = event["conversation_id"], event["lane"], event["event"]
        if kind == "started":
            self._lanes[cid] = max(self._lanes.get(cid, 0), event["lanes"])
        elif kind == "turn":
            self._turn_events += 1
            key = (cid, lane)
            self._turns[key] = max(self._turns.get(key, 0), event["turn_index"])
        elif kind == "ended":
            before = self._ended.get((cid, lane))
            if before is None or before[0] == "dead_letter":
                self._ended[(cid, lane)] = (event["outcome"], event["reason"], event["turn_index"])

    def view(self) -> ConversationView:
        """The figures so far."""
        lanes = sum(self._lanes.values())
        ended = Counter(outcome for outcome, _, _ in self._ended.values())
        turns = sum(t for _, _, t in self._ended.values())
        turns += sum(t for key, t in self._turns.items() if key not in self._ended)
        return ConversationView(
            conversations=len(self._lanes), lanes=lanes, in_progress=max(0, lanes - len(self._ended)),
            turns_done=turns, ended=dict(ended),
            truncated=dict(Counter(r for o, r, _ in self._ended.values() if o == "truncated")),
            dead_lettered=dict(Counter(r for o, r, _ in self._ended.values() if o == "dead_letter")),
            next_prompts=self._turn_events)


class ConversationFeed:
    """Tail the conversations topic from its start, across refreshes (no consumer group).

    Args:
        kafka: the broker and topic prefix.
    """

    def __init__(self, *, kafka: KafkaConfig) -> None:
        self.topic = kafka.conversations_topic
        self.tally = ConversationTally()
        self._consumer = make_consumer(kafka, None, enable_auto_commit=False)
        self._assigned: list[TopicPartition] = []

    def read(self) -> ConversationView | None:
        """Read what is new (for up to READ_SECONDS); None while the topic does not exist."""
        try:
            if not self._assigned:
                partitions = self._consumer.partitions_for_topic(self.topic)
                if not partitions:
                    return None
                self._assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
                self._consumer.assign(self._assigned)
                self._consumer.seek_to_beginning(*self._assigned)
            ends = self._consumer.end_offsets(self._assigned)
            for _, rec in records_to(self._consumer, ends, seconds=READ_SECONDS):
                self._add(rec.value)
        except KafkaError as exc:
            log.warning("cannot read %s (%r)", self.topic, exc)
        return self.tally.view()

    def _add(self, value: bytes | None) -> None:
        try:
            self.tally.add(CONVERSATION_EVENT.decode(value or b""))
        except SchemaError:
            pass  # a record this version cannot read: counted by none of the figures

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()
