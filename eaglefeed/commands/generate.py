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
                   default=None, help="SGLang server base URL; repeat for several "
                   f"(env EAGLEFEED_SGLANG_URL, comma-separated; default {DEFAULT_SGLANG_URL})")
    p.set_defaults(env_sglang_urls=urls)
    p.add_argument("--api-key", default=env_default("API_KEY", None),
                   help="sent as 'Authorization: Bearer'; '@FILE' reads it from a file "
                        "(env EAGLEFEED_API_KEY)")
    p.add_argument("--group-id", default=env_default("GENERATE_GROUP", "eaglefeed-generate"),
                   help="consumer group of the workers")
    p.add_argument("--concurrency", type=int, default=int_env("CONCURRENCY", 256),
                   help="prompts in flight per worker")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per /generate request")
    p.add_argument("--max-attempts", type=int, default=5, help="attempts per sample before dead-lettering")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="exit after this long with nothing to do (for scripted runs)")
    p.add_argument("--worker-id", default=None, help="stamped on records (default host-pid)")
    add_kafka_args(p)
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from consumers import run_worker
    from eaglefeed.lifecycle import StopSignal

    urls = args.sglang_urls or (args.env_sglang_urls or DEFAULT_SGLANG_URL).split(",")
    extra = {"worker_id": args.worker_id} if args.worker_id else {}
    cfg = WorkerConfig(
        kafka=kafka_config(args, "worker"), sglang_urls=tuple(u.strip() for u in urls if u.strip()),
        group_id=args.group_id, api_key=read_secret(args.api_key), concurrency=args.concurrency,
        request_timeout=args.request_timeout, max_attempts=args.max_attempts,
        exit_when_idle=args.exit_when_idle, metrics_port=args.metrics_port, **extra)
    finished = run_worker(cfg, stop=StopSignal().install())
    print(f"generate: finished {finished} prompts")
    return 0
