"""The nemesis scenario's verdicts: stalls counted only once the faults healed, and conversations' books."""

from pathlib import Path

from eaglefeed.core.config import KafkaConfig
from reliability.inputs import CONVERSATION_TURNS, conversation_line
from reliability.ledger import Books, Expected
from reliability.resume import Reading, ResumeWatch
from reliability.scenarios.nemesis import Strike, after_heal_stalls


def watch_with(readings: list[Reading]) -> ResumeWatch:
    watch = ResumeWatch(kafka=KafkaConfig(topic_prefix="t"), partitions=1,
                        groups={"worker": "g", "sink": "s", "converse": "c"})
    watch.readings = readings
    return watch


def reading(t: float, sink: int, generations: int, converse: int | None = None) -> Reading:
    r = Reading(t=t)
    r.committed["sink"] = {0: sink}
    if converse is not None:
        r.committed["converse"] = {0: converse}
    r.ends["generations"] = {0: generations}
    return r


def test_a_stall_counts_from_the_heal_of_the_last_fault_that_struck_before_the_stage_moved():
    watch = watch_with([
        reading(0.0, sink=5, generations=10, converse=5),
        reading(1.0, sink=6, generations=10, converse=6),  # both moving; the sink stands still from 1.0
        reading(30.0, sink=6, generations=12, converse=12),  # converse caught up: no work waiting
        reading(50.0, sink=8, generations=12, converse=12),  # the sink moved at 50.0
    ])
    # a node was killed at 2.0 and served again at 40.0: of the sink's 49 s, 10 came after the heal
    stalls = after_heal_stalls(watch, [Strike("node-kill", "node-1", at=2.0, healed=40.0)], 0.0, 60.0)
    assert stalls["sink"][0] == 10.0
    assert "node-kill node-1" in stalls["sink"][1]
    assert stalls["converse"][0] == 1.0  # from 0.0 to its next move at 1.0 (one reading apart), then idle
    # without any fault the whole stall is the stage's own
    assert after_heal_stalls(watch, [], 0.0, 60.0)["sink"][0] == 49.0


def test_a_fault_of_another_stage_does_not_excuse_a_stall():
    watch = watch_with([reading(0.0, sink=5, generations=10), reading(1.0, sink=5, generations=10),
                        reading(30.0, sink=9, generations=10)])
    strikes = [Strike("node-pause", "node-2", at=2.0, healed=22.0),
               Strike("kill", "worker-1", at=25.0, healed=26.0)]  # the sink waits for no worker
    assert after_heal_stalls(watch, strikes, 0.0, 30.0)["sink"][0] == 8.0  # from the node's heal
    strikes.append(Strike("kill", "sink-1", at=27.0, healed=28.0))  # its own member: a rebalance
    assert after_heal_stalls(watch, strikes, 0.0, 30.0)["sink"][0] == 2.0


def test_a_stall_ended_while_its_fault_still_went_on_counts_nothing():
    watch = watch_with([reading(0.0, sink=5, generations=10), reading(20.0, sink=9, generations=10)])
    paused = Strike("pause", "sink", at=1.0, healed=None)
    assert after_heal_stalls(watch, [paused], 0.0, 30.0)["sink"][0] == 0.0


def conversation_books(tmp_path: Path, lines: int) -> tuple[Books, Expected, str]:
    source = tmp_path / "conversations.jsonl"
    expected = Expected(samples=1)
    expected.add_conversations(source, 1, [conversation_line(n, "t") for n in range(1, lines + 1)])
    books = Books(expected=expected, dataset=tmp_path / "dataset", kafka=KafkaConfig(topic_prefix="t"))
    return books, expected, str(source)


def row(source: str, line: int, turn: int, copy: str = "") -> dict[str, object]:
    return {"id": f"c{line}-{turn}{copy}:0", "prompt_id": f"c{line}-{turn}", "sample_index": 0,
            "source": source, "source_row": f"conv-{line}", "turn_index": turn}


def ended(source: str, line: int, turns: int, outcome: str = "complete") -> dict[str, object]:
    return {"event": "ended", "source": source, "source_row": f"conv-{line}", "outcome": outcome,
            "turn_index": turns, "reason": ""}


def test_a_conversation_is_settled_only_once_its_lane_ended_and_every_turn_is_a_row(tmp_path):
    books, _expected, src = conversation_books(tmp_path, 2)
    for turn in range(CONVERSATION_TURNS):
        books._add_row(row(src, 1, turn))
    assert not books.settled()  # no ended event yet: missing, however many rows there are
    assert books.outcome().missing == 2
    books._add_event(ended(src, 1, CONVERSATION_TURNS))
    books._add_row(row(src, 2, 0))
    books._add_event(ended(src, 2, 2, outcome="truncated"))  # its turn 1 was cut at `length`
    outcome = books.outcome()
    assert outcome.missing == 1 and not books.settled()  # conversation 2's turn 1 has no row
    books._add_row(row(src, 2, 1))
    outcome = books.outcome()
    assert books.settled() and outcome.ok, outcome
    assert outcome.units == CONVERSATION_TURNS + 2 and outcome.inputs == 2


def test_a_doubled_turn_and_a_turn_past_the_end_are_caught(tmp_path):
    books, _expected, src = conversation_books(tmp_path, 1)
    books._add_event(ended(src, 1, 1, outcome="truncated"))
    books._add_row(row(src, 1, 0))
    books._add_row(row(src, 1, 0, copy="again"))  # the same turn under a second id
    books._add_row(row(src, 1, 1))  # a turn after the lane ended
    outcome = books.outcome()
    assert outcome.duplicates == 1 and outcome.unexpected == 1 and not outcome.ok


def test_a_dead_lettered_turn_settles_a_lane_that_ended_with_it(tmp_path):
    books, _expected, src = conversation_books(tmp_path, 1)
    books._add_row(row(src, 1, 0))
    books._add_event(ended(src, 1, 1, outcome="dead_letter"))
    assert not books.settled()  # turn 1 must be a dead letter
    books.letter_units.add(("conv", src, 1, 1))
    assert books.settled() and books.outcome().ok
