"""A line dead-lettered by one produce run and published by a later one: its letters read as fixed.

The producer side (ledger memory, fix markers after the prompt's acknowledgement) runs against the
fake Kafka; the reader side (``read_dead_letters``) reads the same fake topics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError
from prometheus_client import CollectorRegistry

from eaglefeed.cli.main import main
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.core.errors import DeliveryError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.core.metrics import ProducerMetrics
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.ops import redrive as ops
from eaglefeed.ops.redrive import read_dead_letters, redrive, summary
from eaglefeed.producers.build import BatchResult, PromptBuilder, Rejected
from eaglefeed.producers.fixes import DeadLettered
from eaglefeed.producers.follow import IDLE, input_stream
from eaglefeed.producers.ledger import Ledger
from eaglefeed.producers.pool import Batch
from eaglefeed.producers.position import Position
from eaglefeed.producers.progress import Progress
from eaglefeed.producers.publisher import Publisher
from eaglefeed.producers.sources import Mark, SourceRow
from tests.fakes.kafka import FakeKafka

KAFKA = KafkaConfig(topic_prefix="t")
CFG = ProducerConfig(kafka=KAFKA, inputs=("/data/in.jsonl",), prompts=PromptSettings(tokenizer="tok"))
SOURCE = "/data/in.jsonl"
PID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def fake() -> FakeKafka:
    kafka = FakeKafka()
    for topic in (KAFKA.prompts_topic, KAFKA.dead_letter_topic, KAFKA.redriven_topic):
        kafka.create_topic(topic)
    return kafka


class Run:
    """One produce run: a publisher on the fake broker with the ledger at ``path``."""

    def __init__(self, fake: FakeKafka, path: Path, *, restart: bool = False) -> None:
        self.ledger = Ledger(path, restart=restart)
        self.created = 0
        self.publisher = Publisher(cfg=CFG, producer=fake.producer(),
                                   metrics=ProducerMetrics.create(CollectorRegistry()), ledger=self.ledger,
                                   progress=Progress(enabled=False), ensure_marker_topic=self._create)
        self._marks = 0

    def _create(self) -> None:
        self.created += 1

    def batch(self, *, good: dict[int, str] | None = None, bad: tuple[int, ...] = ()) -> None:
        """Publish one batch: ``good`` lines → prompt ids, ``bad`` lines rejected; then a checkpoint."""
        good = good or {}
        result = BatchResult(rows=len(good) + len(bad))
        for line, pid in good.items():
            result.prompts.append((pid.encode(), b"record", 3))
            result.lines[(SOURCE, line)] = pid
        result.rejected = [Rejected(SOURCE, line, "invalid_json", "line is not valid JSON", b"{oops")
                           for line in bad]
        self._marks += 1
        mark = Mark(SOURCE, Position(self._marks * 10, self._marks, "sha"), 10)
        self.publisher.publish(Batch(marks=[mark]), result)
        self.publisher.checkpoint()

    def close(self) -> None:
        self.publisher.close()
        self.ledger.close()
        time.sleep(0.003)  # the next run's letters and markers carry later milliseconds


def markers(fake: FakeKafka) -> list[tuple[str, dict]]:
    return [(r.key.decode(), json.loads(r.value)) for r in fake.read(KAFKA.redriven_topic)]


def test_a_line_dead_lettered_then_published_by_a_later_run_reads_as_fixed(fake, tmp_path):
    first = Run(fake, tmp_path / "l.json")
    first.batch(good={1: PID.replace("0", "1")}, bad=(17,))
    first.close()
    assert markers(fake) == []
    (open_,) = read_dead_letters(KAFKA, clients=fake)
    assert open_.fixed is None and not open_.resolved

    second = Run(fake, tmp_path / "l.json")
    assert (SOURCE, 17) in second.ledger.dead_lettered  # the ledger remembered it across runs
    second.batch(good={1: PID.replace("0", "1"), 17: PID})
    assert second.publisher.summary.fixed == 1 and second.created == 1
    assert "; fixed 1 lines dead-lettered before" in second.publisher.summary.describe()
    second.close()

    ((key, value),) = markers(fake)
    assert key == f"produce:{SOURCE}:17" and value["prompt_id"] == PID
    (letter,) = read_dead_letters(KAFKA, clients=fake)
    assert letter.resolved and letter.fixed == value
    assert f"[fixed: published as prompt {PID} at " in letter.describe()
    assert letter.as_json()["fixed_prompt_id"] == PID and letter.as_json()["fixed_at"] == value["fixed_at"]
    assert summary([letter]) == {("produce", "invalid_json", True): 1}
    for again in (False, True):  # nothing to re-drive, and nothing to tell the user to fix
        done = redrive(KAFKA, [letter], again=again, send=lambda *rec: pytest.fail("sent"))
        assert (done.fixed, done.skipped, done.republished) == ([letter], [], [])
    reopened = Ledger(tmp_path / "l.json")
    assert (SOURCE, 17) not in reopened.dead_lettered  # forgotten once its marker was acknowledged
    reopened.close()


def test_a_line_that_fails_again_gets_an_open_letter_and_a_second_fix_resolves_both(fake, tmp_path):
    path = tmp_path / "l.json"
    for good, bad in (({}, (17,)), ({17: PID}, ()), ({}, (17,))):
        run = Run(fake, path)
        run.batch(good=good, bad=bad)
        run.close()
    old, new = read_dead_letters(KAFKA, clients=fake)
    assert old.resolved and not new.resolved  # the fix came before the second failure
    run = Run(fake, path)
    run.batch(good={17: PID})
    run.close()
    assert all(d.resolved for d in read_dead_letters(KAFKA, clients=fake))
    assert len(markers(fake)) == 2  # one per fix (compaction keeps the newest)
    run = Run(fake, path)  # a third read of the line, fine all along: no marker any more
    run.batch(good={17: PID})
    run.close()
    assert len(markers(fake)) == 2


def test_a_duplicate_letter_of_an_interrupted_run_is_fixed_too(fake, tmp_path):
    """A run killed before its ledger commit dead-letters the line again next time: both letters resolve."""
    path = tmp_path / "l.json"
    killed = Run(fake, path)
    killed.publisher.publish(Batch(), BatchResult(rejected=[Rejected(SOURCE, 17, "invalid_json", "x", b"{")]))
    killed.publisher.producer.flush()  # the letter is on the topic, but no checkpoint saved the ledger
    killed.ledger.close()
    for good, bad in (({}, (17,)), ({17: PID}, ())):
        run = Run(fake, path)
        run.batch(good=good, bad=bad)
        run.close()
    letters = read_dead_letters(KAFKA, clients=fake)
    assert len(letters) == 2 and all(d.resolved for d in letters)


def test_a_row_that_also_lost_a_turn_is_not_fixed_and_other_lines_are_left_alone(fake, tmp_path):
    path = tmp_path / "l.json"
    run = Run(fake, path)
    run.batch(bad=(17, 18))
    run.batch(good={17: PID}, bad=(17,))  # --turns all: one turn published, another too long
    run.batch(good={5: PID.replace("0", "5")})  # never dead-lettered
    assert markers(fake) == [] and run.created == 0
    run.batch(good={18: PID.replace("0", "8")})  # the same run (--follow) reads line 18 fixed
    run.close()
    assert [key for key, _v in markers(fake)] == [f"produce:{SOURCE}:18"]
    states = {(d.record["line"], d.resolved) for d in read_dead_letters(KAFKA, clients=fake)}
    assert states == {(17, False), (18, True)}


def test_an_unacknowledged_marker_fails_the_checkpoint_and_the_ledger_keeps_the_line(fake, tmp_path):
    path = tmp_path / "l.json"
    run = Run(fake, path)
    run.batch(bad=(17,))
    run.close()
    run = Run(fake, path)
    saved = run.ledger.get(SOURCE)
    fake.fail_sends(KafkaTimeoutError("no leader"), topic=KAFKA.redriven_topic)
    with pytest.raises(DeliveryError):
        run.batch(good={17: PID})
    run.ledger.close()
    again = Ledger(path)
    assert (SOURCE, 17) in again.dead_lettered and again.get(SOURCE) == saved  # nothing moved on
    again.close()


def test_restart_keeps_the_dead_lettered_lines(fake, tmp_path):
    path = tmp_path / "l.json"
    run = Run(fake, path)
    run.batch(bad=(17,))
    run.close()
    run = Run(fake, path, restart=True)
    assert run.ledger.get(SOURCE) is None and (SOURCE, 17) in run.ledger.dead_lettered
    run.batch(good={17: PID})
    run.close()
    assert [key for key, _v in markers(fake)] == [f"produce:{SOURCE}:17"]


def test_restart_over_an_unreadable_ledger_starts_clean(tmp_path):
    path = tmp_path / "l.json"
    path.write_text("not a ledger")
    ledger = Ledger(path, restart=True)
    assert ledger.positions() == {} and len(ledger.dead_lettered) == 0
    ledger.close()


def test_the_dead_lettered_lines_are_bounded_and_round_trip():
    lines = DeadLettered(limit=10)
    for n in range(25):
        lines.add("a" if n % 2 else "b", n)
    assert len(lines) <= 10 and ("a", 24) not in lines and ("b", 24) in lines and ("b", 0) not in lines
    back = DeadLettered.from_json(json.loads(json.dumps(lines.to_json())), limit=10)
    assert set(back) == set(lines)
    lines.discard("b", 24)
    assert ("b", 24) not in lines
    with pytest.raises(ValueError):
        DeadLettered.from_json({"a": 3})


def test_the_cli_lists_counts_and_leaves_a_fixed_letter_alone(fake, tmp_path, monkeypatch, capsys):
    path = tmp_path / "l.json"
    for good, bad in (({}, (17, 18)), ({17: PID}, ())):
        run = Run(fake, path)
        run.batch(good=good, bad=bad)
        run.close()
    real = ops.read_dead_letters
    monkeypatch.setattr(ops, "read_dead_letters", lambda kafka: real(kafka, clients=fake))

    def cli(*flags: str) -> list[str]:
        assert main(["dead-letters", "--topic-prefix", "t", *flags]) == 0
        return capsys.readouterr().out.splitlines()

    listed = cli()
    assert listed[-1] == "2 dead letters in t.dead-letter (1 open, 0 re-driven, 1 fixed)"
    assert [line.endswith("]") for line in listed[:-1]] == [True, False]  # line 17, then 18
    assert f"{SOURCE}:17: line is not valid JSON [fixed: published as prompt {PID} at " in listed[0]
    assert cli("--summary")[1].split() == ["2", "1", "1", "produce", "invalid_json"]
    (row,) = json.loads(cli("--summary", "--json")[0])
    assert (row["open"], row["resolved"], row["fixed"], row["redriven"]) == (1, 1, 1, 0)
    out = cli("--redrive", "--stage", "produce")
    assert out == [f"not re-driven: {listed[1].split()[0]} invalid_json: fix {SOURCE} line 18 and run "
                   "produce again",
                   "re-drove 0 records from 2 dead letters (1 not re-drivable, 1 fixed since (published by "
                   "produce))"]


def test_under_follow_a_line_fixed_in_place_marks_its_letter_in_the_same_run(fake, tmp_path):
    """``produce --follow``: the real reader sees the edit, the real builder the fixed line."""
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    path = tmp_path / "in.jsonl"
    path.write_text(f"{good}\n{{oops\n")
    builder = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR)), fast=False)
    run = Run(fake, tmp_path / "l.json")
    stop = StopSignal()
    stream = input_stream([str(path)], ledger=run.ledger, follow=True, stop=stop, poll_interval=0.01,
                          settle=0)

    def round_() -> None:
        batch = Batch()
        for item in stream:
            if item is IDLE:
                break
            if isinstance(item, SourceRow):
                batch.rows.append(item)
            elif isinstance(item, Mark):
                batch.marks.append(item)
        run.publisher.publish(batch, builder.build(batch.rows))
        run.publisher.checkpoint()

    round_()
    assert run.publisher.summary.dead_lettered == 1 and markers(fake) == []
    time.sleep(0.003)
    path.write_text(f"{good}\n{json.dumps({'messages': [{'role': 'user', 'content': 'fixed'}]})}\n")
    round_()
    stop.set()
    run.close()
    ((key, value),) = markers(fake)
    assert key == f"produce:{path}:2" and run.publisher.summary.fixed == 1
    (letter,) = read_dead_letters(KAFKA, clients=fake)
    assert letter.record["source"] == str(path) and letter.fixed == value


def test_the_reason_of_each_open_letter_round_trips_and_an_older_ledger_reads_as_unknown():
    lines = DeadLettered()
    lines.add("a", 3, "invalid_json")
    lines.add("a", 5)
    back = DeadLettered.from_json(json.loads(json.dumps(lines.to_json())))
    assert back.lettered("a", 3, "invalid_json") and not back.lettered("a", 3, "wrong_type")
    assert not back.lettered("a", 5, "invalid_json")
    old = DeadLettered.from_json({"a": [3, 5]})  # the layout before reasons were kept
    assert set(old) == {("a", 3), ("a", 5)} and not old.lettered("a", 3, "invalid_json")
    back.forget_reasons()  # a new dead-letter topic: every bad line gets its letter again
    assert set(back) == {("a", 3), ("a", 5)} and not back.lettered("a", 3, "invalid_json")
