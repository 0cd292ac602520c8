"""``eaglefeed produce``: prompt files → PromptRecords on Kafka."""

from __future__ import annotations

import argparse
import json

from eaglefeed.commands._common import add_command, add_kafka_args, kafka_config
from eaglefeed.config import ProducerConfig, SamplingDefaults, env_default


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    from eaglefeed.demo import TOKENIZER_DIR

    d = SamplingDefaults()
    p = add_command(sub, "produce",
                    "render, tokenize and publish prompts from JSONL files, folders or stdin (-)")
    p.add_argument("inputs", nargs="+", help="JSONL files, folders of them, or - for stdin")
    p.add_argument("--tokenizer", default=env_default("TOKENIZER", str(TOKENIZER_DIR)),
                   help="the target model's tokenizer (path or hub id) whose chat template renders "
                        "the prompts (env EAGLEFEED_TOKENIZER; default: the bundled demo tokenizer)")
    p.add_argument("--samples", type=int, default=1, help="generations wanted per prompt")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--top-k", type=int, default=d.top_k, help="-1 means all tokens")
    p.add_argument("--min-p", type=float, default=d.min_p)
    p.add_argument("--seed", type=int, default=d.seed, help="base seed; sample i uses seed+i")
    p.add_argument("--stop-token-ids", default="", help="comma-separated extra stop token ids")
    p.add_argument("--chat-template-kwargs", default="{}",
                   help='JSON object passed to the chat template, e.g. \'{"enable_thinking": false}\'')
    p.add_argument("--max-prompt-tokens", type=int, default=32768,
                   help="longer prompts go to the dead-letter topic")
    p.add_argument("--partitions", type=int, default=6, help="partitions of topics created here")
    p.add_argument("--strict", action="store_true", help="exit non-zero if any line was bad")
    add_kafka_args(p)
    p.set_defaults(run=_run_produce)


def _run_produce(args: argparse.Namespace) -> int:
    from producers import run_producer

    try:
        kwargs = json.loads(args.chat_template_kwargs)
        stops = tuple(int(t) for t in args.stop_token_ids.split(",") if t.strip())
    except ValueError as exc:
        raise SystemExit(f"eaglefeed produce: bad --chat-template-kwargs or --stop-token-ids: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise SystemExit("eaglefeed produce: --chat-template-kwargs must be a JSON object")
    cfg = ProducerConfig(
        kafka=kafka_config(args, "producer"), inputs=tuple(args.inputs), tokenizer=args.tokenizer,
        samples=args.samples, chat_template_kwargs=kwargs, max_prompt_tokens=args.max_prompt_tokens,
        partitions=args.partitions, strict=args.strict, metrics_port=args.metrics_port,
        sampling=SamplingDefaults(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                                  seed=args.seed, stop_token_ids=stops))
    summary = run_producer(cfg)
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(summary.bad_by_reason.items())) or "none"
    print(f"published {summary.published} prompts ({summary.prompt_tokens} tokens); "
          f"dead-lettered {summary.dead_lettered} lines ({reasons})")
    return 2 if args.strict and summary.dead_lettered else 0
