"""``eaglefeed dead-letters``: list, count and re-drive what the pipeline could not process."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from eaglefeed.cli._common import add_command, add_connection_args, kafka_config

STAGES = ("produce", "generate", "converse", "sink")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "dead-letters",
                    "read <prefix>.dead-letter: list (reason, stage, source file and line, prompt id, "
                    "message), count by reason, re-drive selected ones to the pipeline after a fix")
    add_connection_args(p, interactive=True)
    p.add_argument("--kind", action="append", default=[], metavar="REASON",
                   help="only dead letters with this reason (error kind), e.g. http_503; repeatable")
    p.add_argument("--id", action="append", default=[], dest="ids", metavar="ID",
                   help="only this prompt id, record id (prompt_id:sample) or position P@O; repeatable")
    p.add_argument("--stage", choices=STAGES, default=None, help="only dead letters of this stage")
    p.add_argument("--json", action="store_true", help="one JSON object per dead letter (JSON lines)")
    p.add_argument("--summary", action="store_true",
                   help="count the selected dead letters by stage and reason")
    p.add_argument("--redrive", action="store_true",
                   help="republish the selected dead letters' originals (generate: the prompt, to the "
                        "prompts topic; sink: the generation) once the cause is fixed; rows are never "
                        "doubled (the sink drops ids it has); produce-stage ones need the source fixed "
                        "(the produce run that publishes the fixed line marks them fixed); "
                        "each re-driven letter is recorded on <prefix>.redriven, and a later --redrive "
                        "skips it")
    p.add_argument("--again", action="store_true",
                   help="with --redrive: re-drive letters an earlier --redrive re-drove too")
    p.set_defaults(run=_run_dead_letters)


def _run_dead_letters(args: argparse.Namespace) -> int:
    from eaglefeed.ops.redrive import read_dead_letters, redrive, summary

    kafka = kafka_config(args, "dead-letters")
    letters = [d for d in read_dead_letters(kafka)
               if d.matches(kinds=args.kind, ids=args.ids, stage=args.stage)]
    if args.redrive:
        if not (args.kind or args.ids or args.stage):
            raise SystemExit("eaglefeed dead-letters: --redrive needs a selection (--kind, --id or --stage)")
        done = redrive(kafka, letters, again=args.again)
        for letter, why in done.skipped:
            print(f"not re-driven: {letter.position} {letter.record['error_kind']}: {why}")
        already = f", {len(done.already)} re-driven before (--again re-drives them)" if done.already else ""
        fixed = f", {len(done.fixed)} fixed since (published by produce)" if done.fixed else ""
        print(f"re-drove {len(done.republished)} records from {len(letters)} dead letters "
              f"({len(done.skipped)} not re-drivable{already}{fixed})")
        return 0
    if args.summary:
        _print_summary(summary(letters), json_out=args.json, topic=kafka.dead_letter_topic)
        return 0
    for letter in letters:
        print(json.dumps(letter.as_json()) if args.json else letter.describe())
    if not args.json:
        redriven = sum(1 for d in letters if d.redriven is not None)
        fixes = sum(1 for d in letters if d.fixed is not None)
        print(f"{len(letters)} dead letters in {kafka.dead_letter_topic} "
              f"({sum(1 for d in letters if not d.resolved)} open, {redriven} re-driven"
              + (f", {fixes} fixed)" if fixes else ")"))
    return 0


def _print_summary(counts: Counter[tuple[str, str, bool]], *, json_out: bool, topic: str) -> None:
    """Per (stage, reason): all, open and resolved letters (re-driven; for produce, fixed and published)."""
    rows: dict[tuple[str, str], list[int]] = {}
    for (stage, kind, redriven), n in counts.items():
        row = rows.setdefault((stage, kind), [0, 0])
        row[1 if redriven else 0] += n
    ordered = sorted(rows.items(), key=lambda item: (-sum(item[1]), item[0]))
    if json_out:
        print(json.dumps([{"stage": s, "reason": k, "count": o + r, "open": o, "resolved": r,
                           "redriven": 0 if s == "produce" else r, "fixed": r if s == "produce" else 0}
                          for (s, k), (o, r) in ordered]))
        return
    print(f"{'count':>8}  {'open':>8}  {'resolved':>8}  stage     reason")
    for (stage, kind), (open_, resolved) in ordered:
        print(f"{open_ + resolved:>8}  {open_:>8}  {resolved:>8}  {stage:<9} {kind}")
    total_open = sum(o for o, _r in rows.values())
    total = sum(o + r for o, r in rows.values())
    print(f"{total:>8}  {total_open:>8}  {total - total_open:>8}  dead letters in {topic} "
          f"(resolved: re-driven by --redrive; produce: the line fixed and published by produce)")
