"""The worker's pause/resume turn against the rebalance listener (issue 26).

The listener runs on kafka-python's IO thread; it holds a new partition, then pauses it. A turn that
read the holds before the paused set could resume such a partition at once, should the listener run
between the two reads (in 3.0.12 it runs while the consumer thread waits inside ``poll()``, so this
is an ordering kept safe on purpose, not the incident's proven path): fetched before the group
settled, then paused again mid-batch once the hold was seen, it was what kafka-python 3.0.12 never
fetches again (``eaglefeed.core.resume``).
"""

from __future__ import annotations

from types import SimpleNamespace

from kafka.structs import TopicPartition

from eaglefeed.consumers.generate.loop import _Worker
from eaglefeed.consumers.generate.rebalance import SettleHold

OLD, NEW = TopicPartition("t", 0), TopicPartition("t", 1)


class Consumer:
    def __init__(self) -> None:
        self.assigned = {OLD}
        self.paused_set: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set(self.paused_set)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused_set |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused_set -= set(tps)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        return {}


class ListenerRunsAfterHeld(SettleHold):
    """``held()`` returns, then the listener assigns, holds and pauses ``NEW`` (as on its own thread)."""

    def __init__(self, consumer: Consumer) -> None:
        super().__init__(seconds=5)
        self.consumer = consumer
        self.fired = False

    def held(self) -> set[TopicPartition]:
        held = super().held()
        if not self.fired:
            self.fired = True
            self.consumer.assigned.add(NEW)
            self.assigned({NEW})  # what Rebalance.on_partitions_assigned does, in its order
            self.consumer.pause(NEW)
        return held


def turn(consumer: Consumer, hold: SettleHold, room: int) -> None:
    worker = SimpleNamespace(consumer=consumer, hold=hold,
                             watchdog=SimpleNamespace(observe=lambda c, b: None),
                             checkpoint=SimpleNamespace(load_committed=lambda: None))
    _Worker._poll(worker, room)  # type: ignore[arg-type]


def test_a_partition_the_listener_holds_during_a_turn_stays_paused():
    consumer = Consumer()
    hold = ListenerRunsAfterHeld(consumer)
    turn(consumer, hold, room=10)
    assert NEW in consumer.paused(), "a just-held partition was resumed before the group settled"
    turn(consumer, hold, room=10)
    assert consumer.paused() == {NEW}  # still held; the old one is read


def test_paused_partitions_are_resumed_when_there_is_room_again():
    consumer = Consumer()
    hold = SettleHold(seconds=5)
    turn(consumer, hold, room=0)
    assert consumer.paused() == {OLD}
    turn(consumer, hold, room=3)
    assert consumer.paused() == set()
