"""``eaglefeed generate``: a generate worker of the consumer group."""

from __future__ import annotations

import argparse

from eaglefeed.commands._common import add_command, add_kafka_args, int_env, kafka_config
from eaglefeed.config import DEFAULT_SGLANG_URL, WorkerConfig, env_default, read_secret


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "generate",
                    "generate workers: send prompt ids to SGLang /generate, publish exact output ids")
    urls = env_default("SGLANG_URL", None)
    p.add_argument("--sglang-url", action="append", dest="sglang_urls",
                   default=None, help="SGLang server (or router) base URL; repeat for several "
                   f"(env EAGLEFEED_SGLANG_URL, comma-separated; default {DEFAULT_SGLANG_URL})")
    p.set_defaults(env_sglang_urls=urls)
    p.add_argument("--api-key", default=None,
                   help="sent as 'Authorization: Bearer'; '@FILE' reads it from a file "
                        "(env EAGLEFEED_API_KEY)")
    p.add_argument("--group-id", default=env_default("GENERATE_GROUP", "eaglefeed-generate"),
                   help="consumer group of the workers")
    p.add_argument("--concurrency", type=int, default=int_env("CONCURRENCY", 256),
                   help="sequences in flight per worker, over all servers (size it to the servers' "
                        "--max-running-requests); twice as many are fetched ahead")
    p.add_argument("--samples-mode", choices=["separate", "n"], default="separate",
                   help="several samples: one request each (seed + i), or one request with n")
    p.add_argument("--vocab-size", default=env_default("VOCAB_SIZE", "auto"), metavar="{N,auto,off}",
                   help="output ids must be below N; 'auto' loads the tokenizer each prompt names "
                        "(tokenizer_id) once; 'off' skips the check (env EAGLEFEED_VOCAB_SIZE)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per /generate request")
    p.add_argument("--max-attempts", type=int, default=5, help="attempts per request before dead-lettering")
    p.add_argument("--retry-backoff", type=float, default=0.5,
                   help="base seconds of the exponential backoff between attempts (full jitter)")
    p.add_argument("--retry-backoff-max", type=float, default=30.0, help="longest wait between attempts")
    p.add_argument("--eject-after", type=int, default=3,
                   help="consecutive failures that take a server out of rotation until /health is 200")
    p.add_argument("--probe-interval", type=float, default=2.0,
                   help="seconds between health probes of a server out of rotation")
    p.add_argument("--commit-interval", type=float, default=1.0,
                   help="seconds between offset commits (or transactions)")
    p.add_argument("--session-timeout", type=float, default=None,
                   help="seconds before the group gives a silent worker's partitions to others "
                        "(default: eaglefeed's consumer default)")
    p.add_argument("--exactly-once", action="store_true",
                   help="publish generations and commit input offsets in Kafka transactions")
    p.add_argument("--drain-seconds", type=float, default=30.0,
                   help="on SIGTERM/SIGINT, wait this long for in-flight requests before committing "
                        "and exiting (a second signal exits at once)")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="exit after this long with nothing to do (for scripted runs)")
    p.add_argument("--worker-id", default=None,
                   help="stamped on records and part of the transactional id (default host-pid)")
    add_kafka_args(p)
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    import logging

    from consumers import run_worker
    from eaglefeed.lifecycle import StopSignal

    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # a line per request

    urls = args.sglang_urls or (args.env_sglang_urls or DEFAULT_SGLANG_URL).split(",")
    extra = {"worker_id": args.worker_id} if args.worker_id else {}
    vocab = str(args.vocab_size).strip().lower()
    if vocab not in ("auto", "off") and not vocab.isdigit():
        raise SystemExit(f"eaglefeed generate: --vocab-size must be a number, 'auto' or 'off', not {vocab!r}")
    cfg = WorkerConfig(
        kafka=kafka_config(args, "worker"), sglang_urls=tuple(u.strip() for u in urls if u.strip()),
        group_id=args.group_id, api_key=read_secret(args.api_key or env_default("API_KEY", None)),
        concurrency=args.concurrency,
        request_timeout=args.request_timeout, max_attempts=args.max_attempts,
        exit_when_idle=args.exit_when_idle, metrics_port=args.metrics_port,
        samples_mode=args.samples_mode, vocab_size=int(vocab) if vocab.isdigit() else None,
        check_vocab=vocab != "off", exactly_once=args.exactly_once, drain_seconds=args.drain_seconds,
        retry_backoff=args.retry_backoff, retry_backoff_max=args.retry_backoff_max,
        eject_after=args.eject_after, probe_interval=args.probe_interval,
        commit_interval=args.commit_interval, session_timeout=args.session_timeout, **extra)
    finished = run_worker(cfg, stop=StopSignal().install())
    print(f"generate: finished {finished} prompts", flush=True)
    return 0
