"""The reliability suite's books catch what they must: a lost sample, a doubled row, an invented row."""

from __future__ import annotations

from pathlib import Path

from eaglefeed.core.config import KafkaConfig
from eaglefeed.schemas import DEAD_LETTER, PROMPT
from eaglefeed.schemas.deadletter import dead_letter
from reliability.inputs import expected_row_id, good_line, hostile_lines
from reliability.ledger import Books, Expected
from reliability.monitor import Memory
from reliability.report import memory_rows
from tests.factories import make_prompt

SOURCE = Path("/in/prompts.jsonl")


def books(samples: int = 2) -> Books:
    expected = Expected(samples=samples)
    expected.add_lines(SOURCE, 1, [good_line(n, "t") for n in (1, 2, 3)])
    expected.add_injected("t.prompts", 0, 7, prompt_id=None)
    return Books(expected=expected, dataset=Path("/nowhere"), kafka=KafkaConfig())


def row(line: int, sample: int, pid: str | None = None) -> dict[str, object]:
    pid = pid or f"p{line}"
    return {"id": f"{pid}:{sample}", "prompt_id": pid, "sample_index": sample, "source": str(SOURCE),
            "source_row": str(line)}


def letter(**fields: object) -> dict[str, object]:
    return DEAD_LETTER.decode(dead_letter(kind="x", message="m", **fields))  # type: ignore[arg-type]


def test_books_balance_when_every_unit_ends_once():
    b = books()
    for line in (1, 2):
        for sample in (0, 1):
            b._add_row(row(line, sample))
    b._add_letter(letter(stage="produce", source=str(SOURCE), line=3))  # covers both samples of line 3
    b._add_letter(letter(stage="generate", topic="t.prompts", partition=0, offset=7, value=b"junk"))
    out = b.outcome()
    assert b.settled() and out.ok
    assert (out.inputs, out.units, out.rows_out, out.dead_lettered) == (4, 7, 4, 3)


def test_books_catch_missing_duplicate_and_unexpected_rows():
    b = books()
    b._add_row(row(1, 0))
    b._add_row(row(1, 0))  # the same id twice
    b._add_row(row(1, 1, pid="other"))  # line 1 sample 1 under a second prompt id
    b._add_row(row(1, 1))
    b._add_row({**row(9, 0), "source_row": "99"})  # no input made this
    out = b.outcome()
    assert not b.settled() and not out.ok
    assert out.duplicates == 2 and out.unexpected == 1 and out.missing == 5


def test_worker_letters_name_their_sample():
    b = books(samples=2)
    prompt = {**make_prompt(1), "source": str(SOURCE), "source_row": "2"}
    value = PROMPT.encode(prompt)
    b._add_letter(letter(stage="generate", value=value, record_id=f"{prompt['prompt_id']}:1",
                         topic="t.prompts", partition=1, offset=3))
    assert b.letter_units == {("line", str(SOURCE), 2, 1)}
    b._add_letter(letter(stage="generate", value=value, record_id=prompt["prompt_id"], topic="t.prompts",
                         partition=1, offset=3))
    assert ("line", str(SOURCE), 2, 0) in b.letter_units


def test_hostile_lines_are_single_lines_with_known_row_ids():
    lines = hostile_lines(10, 30, seed=3, huge_bytes=10_000)
    assert len(lines) == 30 and all(b"\n" not in line for line in lines)
    assert len(set(lines)) == 30
    assert expected_row_id(12, b'{"id": 7, "messages": []}') == "7"
    assert expected_row_id(12, b"{broken") == "12"


def test_memory_flatness_verdict():
    flat = Memory(series=[[(float(t), 100.0 + (t % 3)) for t in range(40)]])
    growing = Memory(series=[[(float(t), 100.0 + 3 * t) for t in range(40)]])
    rows = {r.name: r for r in memory_rows({"worker-0": flat, "sink": growing, "broker": growing})}
    assert rows["worker-0"].flat and not rows["sink"].flat
    assert not rows["broker"].judged
