"""``eaglefeed dead-letters``: list, count and re-drive what the pipeline could not process."""

from __future__ import annotations

import argparse
import json

from eaglefeed.cli._common import add_command, add_connection_args, kafka_config

STAGES = ("produce", "generate", "converse", "sink")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "dead-letters",
                    "read <prefix>.dead-letter: list (reason, stage, source file and line, prompt id, "
                    "message), count by reason, re-drive selected ones to the pipeline after a fix")
    add_connection_args(p)
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
                        "doubled (the sink drops ids it has); produce-stage ones need the source fixed")
    p.set_defaults(run=_run_dead_letters)


def _run_dead_letters(args: argparse.Namespace) -> int:
    from eaglefeed.ops.redrive import read_dead_letters, redrive, summary

    kafka = kafka_config(args, "dead-letters")
    letters = [d for d in read_dead_letters(kafka)
               if d.matches(kinds=args.kind, ids=args.ids, stage=args.stage)]
    if args.redrive:
        if not (args.kind or args.ids or args.stage):
            raise SystemExit("eaglefeed dead-letters: --redrive needs a selection (--kind, --id or --stage)")
        done = redrive(kafka, letters)
        for letter, why in done.skipped:
            print(f"not re-driven: {letter.position} {letter.record['error_kind']}: {why}")
        print(f"re-drove {len(done.republished)} records from {len(letters)} dead letters "
              f"({len(done.skipped)} not re-drivable)")
        return 0
    if args.summary:
        counts = summary(letters)
        if args.json:
            print(json.dumps([{"stage": s, "reason": k, "count": n} for (s, k), n in counts.most_common()]))
            return 0
        for (stage, kind), count in counts.most_common():
            print(f"{count:>8}  {stage:<9} {kind}")
        print(f"{sum(counts.values()):>8}  dead letters in {kafka.dead_letter_topic}")
        return 0
    for letter in letters:
        print(json.dumps(letter.as_json()) if args.json else letter.describe())
    if not args.json:
        print(f"{len(letters)} dead letters in {kafka.dead_letter_topic}")
    return 0
