"""``eaglefeed produce``: prompt files → PromptRecords on Kafka."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from eaglefeed.commands._common import add_command, add_kafka_args, kafka_config
from eaglefeed.config import DEFAULT_PRODUCER_STATE_DIR, ProducerConfig, SamplingDefaults, env_default


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    from eaglefeed.demo import TOKENIZER_DIR

    d = SamplingDefaults()
    p = add_command(sub, "produce", "render, tokenize and publish prompts from JSONL, JSON-array and "
                                    "Parquet files, folders of them, or stdin (-)")
    p.add_argument("inputs", nargs="+",
                   help="files (.jsonl, .json, .parquet), folders of them, or - for stdin")
    p.add_argument("--tokenizer", default=env_default("TOKENIZER", str(TOKENIZER_DIR)),
                   help="the target model's tokenizer (path or hub id) whose chat template renders "
                        "the prompts (env EAGLEFEED_TOKENIZER; default: the bundled demo tokenizer)")
    p.add_argument("--turns", choices=["last", "all"], default="last",
                   help="last: the conversation up to its last user turn; all: one prompt per assistant turn")
    p.add_argument("--samples", type=_positive, default=1, help="generations wanted per prompt")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--top-k", type=int, default=d.top_k, help="-1 means all tokens")
    p.add_argument("--min-p", type=float, default=d.min_p)
    p.add_argument("--seed", type=int, default=d.seed, help="base seed; sample i uses seed+i")
    p.add_argument("--stop-token-ids", default="", help="comma-separated extra stop token ids")
    p.add_argument("--chat-template-kwargs", default="{}",
                   help='JSON object passed to the chat template, e.g. \'{"enable_thinking": false}\' '
                        "(a file's <name>.overrides.json and each row may override it)")
    p.add_argument("--max-prompt-tokens", type=_positive, default=32768,
                   help="longer prompts go to the dead-letter topic")
    p.add_argument("--skip-done", type=Path, metavar="DATASET_DIR",
                   help="skip prompts that already have --samples rows in this sink dataset")
    p.add_argument("--follow", action="store_true",
                   help="keep watching the inputs for appended lines and new files until interrupted")
    p.add_argument("--state-dir", type=Path, default=env_default("PRODUCER_STATE_DIR", None),
                   help="keep a progress ledger here and resume from it (with --follow the default is "
                        f"{DEFAULT_PRODUCER_STATE_DIR}; env EAGLEFEED_PRODUCER_STATE_DIR)")
    p.add_argument("--poll-interval", type=float, default=1.0, help="--follow: seconds between scans")
    p.add_argument("--workers", default="auto",
                   help="render processes: a number (0 renders in the producer process) or auto "
                        "(one per core for inputs over 4 MB or with --follow, else 0)")
    p.add_argument("--batch-size", type=_positive, default=256, help="rows rendered and tokenized together")
    p.add_argument("--partitions", type=_positive, default=6, help="partitions of topics created here")
    p.add_argument("--strict", action="store_true", help="exit 2 if any line was bad")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="draw a progress bar on stderr (default: when stderr is a terminal)")
    add_kafka_args(p)
    p.set_defaults(run=_run_produce)


def _run_produce(args: argparse.Namespace) -> int:
    from eaglefeed.lifecycle import StopSignal
    from producers import run_producer

    try:
        kwargs = json.loads(args.chat_template_kwargs)
        stops = tuple(int(t) for t in args.stop_token_ids.split(",") if t.strip())
    except ValueError as exc:
        raise SystemExit(f"eaglefeed produce: bad --chat-template-kwargs or --stop-token-ids: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise SystemExit("eaglefeed produce: --chat-template-kwargs must be a JSON object")
    if args.follow and "-" in args.inputs:
        raise SystemExit("eaglefeed produce: --follow watches files and folders, not stdin")
    cfg = ProducerConfig(
        kafka=kafka_config(args, "producer"), inputs=tuple(args.inputs), tokenizer=args.tokenizer,
        samples=args.samples, chat_template_kwargs=kwargs, max_prompt_tokens=args.max_prompt_tokens,
        partitions=args.partitions, strict=args.strict, metrics_port=args.metrics_port,
        sampling=SamplingDefaults(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                                  seed=args.seed, stop_token_ids=stops),
        turns=args.turns, skip_done=args.skip_done, follow=args.follow,
        state_dir=Path(args.state_dir) if args.state_dir else None, poll_interval=args.poll_interval,
        workers=_workers(args), batch_size=args.batch_size,
        progress=sys.stderr.isatty() if args.progress is None else args.progress)
    summary = run_producer(cfg, stop=StopSignal().install())
    print(summary.describe())
    return 2 if args.strict and summary.dead_lettered else 0


def _workers(args: argparse.Namespace) -> int:
    """``--workers`` as a count; auto starts render processes only for inputs that repay their start-up.

    A render process takes about two seconds to start (it imports transformers and loads the
    tokenizer), so small inputs are rendered in the producer process.
    """
    if args.workers != "auto":
        try:
            return max(int(args.workers), 0)
        except ValueError:
            raise SystemExit(f"eaglefeed produce: --workers must be a number or auto, "
                             f"not {args.workers!r}") from None
    # The producer process mostly sends and waits, so one render process per core keeps the
    # cores busiest (measured on 2 cores: 2 processes beat 1).
    cores = os.cpu_count() or 1
    if args.follow:
        return cores
    size = 0
    for name in args.inputs:
        path = Path(name)
        files = path.rglob("*") if path.is_dir() else [path]
        size += sum(f.stat().st_size for f in files if f.is_file())
    return cores if size > 4 * 1024 * 1024 else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
