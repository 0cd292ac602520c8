"""eaglefeed.ops.redrive: what a dead letter says, how it is selected, and what a re-drive republishes."""

import json

from eaglefeed.core.config import KafkaConfig
from eaglefeed.ops.redrive import DeadLetter, redrive, summary
from eaglefeed.schemas import DEAD_LETTER, PROMPT
from tests.factories import prompt

KAFKA = KafkaConfig(topic_prefix="t")


def letter(position, **fields):
    base = {"stage": "generate", "error_kind": "http_400", "message": "too\nlong", "source": None,
            "line": None, "topic": KAFKA.prompts_topic, "partition": 0, "offset": 7, "key": b"k",
            "value": prompt("p1", samples=2), "record_id": "p1:0", "attempts": 1, "created_at": 0}
    return DeadLetter(position=position, record=DEAD_LETTER.decode(DEAD_LETTER.encode({**base, **fields})))


def test_a_dead_letter_reads_in_one_line_and_as_json():
    gen = letter("0@3")
    assert gen.prompt_id == "p1"
    assert gen.describe() == ("0@3 1970-01-01 00:00:00 generate http_400 record p1:0 "
                              "(t.prompts 0@7, 1 attempts): too long")
    bad = letter("0@4", stage="produce", error_kind="invalid_json", source="in.jsonl", line=17, topic=None,
                 value=b"{oops", record_id=None, key=b"in.jsonl:17")
    assert "produce invalid_json in.jsonl:17: too long" in bad.describe()
    row = json.loads(json.dumps(bad.as_json()))
    assert (row["source"], row["line"], row["reason"]) == ("in.jsonl", 17, "invalid_json")
    assert row["value_bytes"] == 5


def test_selection_by_reason_id_and_stage():
    gen = letter("0@3")
    assert gen.matches() and gen.matches(kinds=["http_400"]) and not gen.matches(kinds=["timeout"])
    assert gen.matches(ids=["p1"]) and gen.matches(ids=["p1:0"]) and gen.matches(ids=["0@3"])
    assert not gen.matches(ids=["p2"]) and not gen.matches(stage="sink")
    done = DeadLetter(position="0@6", record=gen.record, redriven={"redriven_at": 0, "to": "t.prompts"})
    assert summary([gen, letter("0@4"), letter("0@5", error_kind="timeout"), done]) == {
        ("generate", "http_400", False): 2, ("generate", "timeout", False): 1,
        ("generate", "http_400", True): 1}


def test_a_redrive_republishes_each_prompt_once_keyed_as_before_and_leaves_produce_ones():
    sent = []
    letters = [letter("0@3"), letter("0@4", record_id="p1:1"),
               letter("0@5", value=PROMPT.encode({**PROMPT.decode(prompt("p2")), "prompt_id": "p2"}),
                      key=b"k2", record_id="p2:0"),
               letter("0@6", stage="produce", source="in.jsonl", line=3, topic=None, value=b"x")]
    done = redrive(KAFKA, letters, send=lambda *rec: sent.append(rec))
    assert done.republished == ["p1", "p2"]
    assert sent[:2] == [(KAFKA.prompts_topic, b"k", prompt("p1", samples=2)),
                        (KAFKA.prompts_topic, b"k2", letters[2].record["value"])]
    # then one marker per re-driven letter, keyed by its position (the produce one is not marked)
    assert [(topic, key, json.loads(value)["to"]) for topic, key, value in sent[2:]] == [
        (KAFKA.redriven_topic, position, KAFKA.prompts_topic) for position in (b"0@3", b"0@4", b"0@5")]
    assert [(d.position, why) for d, why in done.skipped] == [
        ("0@6", "fix in.jsonl line 3 and run produce again")]


def test_a_letter_marked_re_driven_is_skipped_unless_again():
    marked = DeadLetter(position="0@3", record=letter("0@3").record,
                        redriven={"redriven_at": 1, "to": KAFKA.prompts_topic})
    sent = []
    done = redrive(KAFKA, [marked], send=lambda *rec: sent.append(rec))
    assert (done.republished, done.already, sent) == ([], [marked], [])
    assert "[re-driven 1970-01-01 00:00:00]" in marked.describe()
    assert marked.as_json()["redriven_at"] == 1
    again = redrive(KAFKA, [marked], again=True, send=lambda *rec: sent.append(rec))
    assert again.republished == ["p1"]
    assert [rec[0] for rec in sent] == [KAFKA.prompts_topic, KAFKA.redriven_topic]
