"""``produce --keep-duplicates``: identical prompts of distinct row ids are kept apart (issue 27 item 5).

By default a prompt id hashes the conversation, turn and settings only, so identical prompts are
merged whatever their ``id`` (835 of 2,000 source ids never reached the dataset in the issue's run).
"""

from __future__ import annotations

import json

import pytest

from eaglefeed.cli.main import build_parser
from eaglefeed.cli.produce import producer_config
from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.ledger import open_ledger
from eaglefeed.producers.sources import SourceRow
from eaglefeed.schemas import PROMPT

MESSAGES = [{"role": "user", "content": "the same question"}]


def lines(*ids: object) -> list[SourceRow]:
    """Rows with identical messages; an id of None leaves the row without one (its line number is used)."""
    rows = []
    for n, row_id in enumerate(ids, 1):
        row = {"messages": MESSAGES} if row_id is None else {"id": row_id, "messages": MESSAGES}
        rows.append(SourceRow("in.jsonl", n, json.dumps(row).encode()))
    return rows


def prompt_ids(rows: list[SourceRow], *, keep_duplicates: bool = False,
               history: str = "original") -> list[str]:
    settings = PromptSettings(tokenizer=str(TOKENIZER_DIR), keep_duplicates=keep_duplicates, history=history)
    builder = PromptBuilder(settings, fast=False)
    return [key.decode() for key, _v, _n in builder.build(rows).prompts]


def test_by_default_identical_prompts_share_one_id_whatever_their_row_ids():
    assert len(set(prompt_ids(lines("a", "b", "c", None)))) == 1


def test_keep_duplicates_gives_each_row_id_its_own_prompt():
    ids = prompt_ids(lines("a", "b", "a", None, None), keep_duplicates=True)
    assert ids[0] == ids[2]  # the same row id twice is still one prompt (a re-read row adds nothing)
    assert len({ids[0], ids[1], ids[3], ids[4]}) == 4  # rows without an id: their line numbers differ
    assert prompt_ids(lines("a"), keep_duplicates=True) == ids[:1]  # stable: the same row, the same id
    assert prompt_ids(lines("a")) != ids[:1]


def test_keep_duplicates_records_the_row_id_and_keeps_the_rest_of_the_record():
    builder = PromptBuilder(PromptSettings(tokenizer=str(TOKENIZER_DIR), keep_duplicates=True), fast=False)
    records = [PROMPT.decode(v) for _k, v, _n in builder.build(lines("a", "b")).prompts]
    assert [r["source_row"] for r in records] == ["a", "b"]
    assert records[0]["input_ids"] == records[1]["input_ids"]


@pytest.mark.parametrize("mode", ["rerender", "tokens"])
def test_keep_duplicates_keeps_identical_conversations_apart(mode):
    assert len(set(prompt_ids(lines("a", "b"), history=mode))) == 1
    assert len(set(prompt_ids(lines("a", "b"), history=mode, keep_duplicates=True))) == 2


def test_the_flag_reaches_the_prompt_settings_and_keys_another_ledger(tmp_path):
    parse = build_parser().parse_args
    base = ["produce", "in.jsonl", "--tokenizer", str(TOKENIZER_DIR), "--state-dir", str(tmp_path)]
    assert producer_config(parse(base)).prompts.keep_duplicates is False
    assert producer_config(parse([*base, "--keep-duplicates"])).prompts.keep_duplicates is True

    def ledger_name(keep: bool) -> str:
        cfg = ProducerConfig(kafka=KafkaConfig(topic_prefix="t"), inputs=("/nonexistent/in.jsonl",),
                             prompts=PromptSettings(tokenizer="tok", keep_duplicates=keep), follow=True,
                             state_dir=tmp_path)
        ledger = open_ledger(cfg, files=[])
        assert ledger is not None
        ledger.close()
        return ledger.path.name

    # a merging run's progress must not let a --keep-duplicates run skip the rows it merged
    assert ledger_name(True) != ledger_name(False)


@pytest.mark.parametrize(("flags", "noted"), [([], True), (["--keep-duplicates"], False)])
def test_produce_says_how_many_prompts_it_merged_and_how_to_keep_them(flags, noted, monkeypatch, tmp_path,
                                                                      capsys):
    import eaglefeed.producers as producers
    from eaglefeed.cli.main import main
    from eaglefeed.producers.publisher import ProduceSummary

    summary = ProduceSummary(rows=5, published=2, skipped_by_reason={"duplicate": 3})
    monkeypatch.setattr(producers, "run_producer", lambda cfg, stop: summary)
    (tmp_path / "in.jsonl").write_text("")
    assert main(["produce", str(tmp_path / "in.jsonl"), "--tokenizer", str(TOKENIZER_DIR),
                 "--state-dir", str(tmp_path), *flags]) == 0
    out = capsys.readouterr()
    assert "skipped 3 (duplicate=3)" in out.out
    assert ("3 prompts were identical" in out.err and "--keep-duplicates" in out.err) is noted
