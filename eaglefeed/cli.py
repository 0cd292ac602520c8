"""The ``eaglefeed`` command: parse flags (and EAGLEFEED_* variables), build config, run a stage."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from eaglefeed import __version__
from eaglefeed.config import (
    DEFAULT_BOOTSTRAP_SERVERS,
    DEFAULT_BROKER_DIR,
    DEFAULT_BROKER_PORT,
    DEFAULT_SGLANG_URL,
    DEFAULT_TOPIC_PREFIX,
    KafkaConfig,
    ProducerConfig,
    SamplingDefaults,
    SinkConfig,
    WorkerConfig,
    env_default,
    read_secret,
)
from eaglefeed.errors import EaglefeedError

log = logging.getLogger("eaglefeed")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``eaglefeed`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        return int(args.run(args) or 0)
    except EaglefeedError as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="eaglefeed", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Token-exact training data for speculative-decoding draft models: "
                    "prompts → Kafka → SGLang /generate → Kafka → Parquet.")
    parser.add_argument("--version", action="version", version=f"eaglefeed {__version__}")
    parser.add_argument("--log-level", default=env_default("LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"], help="log verbosity")
    sub = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _broker_parser(sub)
    _standin_parser(sub)
    _produce_parser(sub)
    _generate_parser(sub)
    _sink_parser(sub)
    _demo_parser(sub)
    return parser


def _command(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help_text, description=help_text,
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def _kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", default=env_default("BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP_SERVERS),
                   help="Kafka bootstrap servers, host:port[,host:port] (env EAGLEFEED_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic-prefix", default=env_default("TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX),
                   help="topics are <prefix>.prompts, <prefix>.generations, <prefix>.dead-letter "
                        "(env EAGLEFEED_TOPIC_PREFIX)")
    p.add_argument("--metrics-port", type=int, default=_int_env("METRICS_PORT"),
                   help="serve Prometheus /metrics on 127.0.0.1:PORT (env EAGLEFEED_METRICS_PORT)")


def _kafka_config(args: argparse.Namespace, role: str) -> KafkaConfig:
    return KafkaConfig(bootstrap_servers=args.bootstrap_servers, topic_prefix=args.topic_prefix,
                       client_id=f"eaglefeed-{role}")


# --- broker -------------------------------------------------------------------------------

def _broker_parser(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "broker", "run a local single-node Apache Kafka 4.x broker (KRaft) from Maven jars")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--data-dir", type=Path,
                   default=Path(env_default("BROKER_DIR", DEFAULT_BROKER_DIR) or "."),
                   help="storage, settings, pid and logs of the broker (env EAGLEFEED_BROKER_DIR)")
    p.add_argument("--port", type=int, default=_int_env("BROKER_PORT", DEFAULT_BROKER_PORT),
                   help="client port on 127.0.0.1; the controller uses PORT+1 (env EAGLEFEED_BROKER_PORT)")
    p.add_argument("--cache-dir", type=Path, default=_cache_dir(),
                   help="where the Kafka jars are cached (env EAGLEFEED_CACHE_DIR)")
    p.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from eaglefeed import localbroker

    if args.action == "start":
        st = localbroker.start(data_dir=args.data_dir, port=args.port, cache_dir=args.cache_dir)
        print(f"broker running (pid {st.pid}) at {st.bootstrap_servers}; logs in {st.data_dir}/logs")
        return 0
    if args.action == "stop":
        print("broker stopped" if localbroker.stop(args.data_dir) else "no broker running")
        return 0
    st = localbroker.status(args.data_dir)
    print(f"running (pid {st.pid}) at {st.bootstrap_servers}" if st.running else "not running")
    return 0 if st.running else 3


# --- stand-in -----------------------------------------------------------------------------

def _standin_parser(sub: argparse._SubParsersAction) -> None:
    from eaglefeed import standin

    p = _command(sub, "stub-sglang", "run the SGLang stand-in (a test and demo double of SGLang's "
                                     "native HTTP API; no GPU, no model)")
    standin.add_arguments(p)
    p.set_defaults(run=standin.run)


# --- produce ------------------------------------------------------------------------------

def _produce_parser(sub: argparse._SubParsersAction) -> None:
    from eaglefeed.demo import TOKENIZER_DIR

    d = SamplingDefaults()
    p = _command(sub, "produce",
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
    _kafka_args(p)
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
        kafka=_kafka_config(args, "producer"), inputs=tuple(args.inputs), tokenizer=args.tokenizer,
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


# --- generate -----------------------------------------------------------------------------

def _generate_parser(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "generate",
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
    p.add_argument("--concurrency", type=int, default=_int_env("CONCURRENCY", 256),
                   help="prompts in flight per worker")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per /generate request")
    p.add_argument("--max-attempts", type=int, default=5, help="attempts per sample before dead-lettering")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="exit after this long with nothing to do (for scripted runs)")
    p.add_argument("--worker-id", default=None, help="stamped on records (default host-pid)")
    _kafka_args(p)
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from consumers import run_worker
    from eaglefeed.lifecycle import StopSignal

    urls = args.sglang_urls or (args.env_sglang_urls or DEFAULT_SGLANG_URL).split(",")
    extra = {"worker_id": args.worker_id} if args.worker_id else {}
    cfg = WorkerConfig(
        kafka=_kafka_config(args, "worker"), sglang_urls=tuple(u.strip() for u in urls if u.strip()),
        group_id=args.group_id, api_key=read_secret(args.api_key), concurrency=args.concurrency,
        request_timeout=args.request_timeout, max_attempts=args.max_attempts,
        exit_when_idle=args.exit_when_idle, metrics_port=args.metrics_port, **extra)
    finished = run_worker(cfg, stop=StopSignal().install())
    print(f"generate: finished {finished} prompts")
    return 0


# --- sink ---------------------------------------------------------------------------------

def _sink_parser(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "sink", "write generations into deduplicated Parquet training segments, exactly once")
    p.add_argument("--output", type=Path, required=env_default("OUTPUT", None) is None,
                   default=env_default("OUTPUT", None), help="dataset directory (env EAGLEFEED_OUTPUT)")
    p.add_argument("--group-id", default=env_default("SINK_GROUP", "eaglefeed-sink"))
    p.add_argument("--flush-rows", type=int, default=10000, help="segment size in rows")
    p.add_argument("--flush-bytes", type=int, default=256 * 1024 * 1024, help="segment size in bytes")
    p.add_argument("--flush-seconds", type=float, default=30.0, help="maximum age of a buffered row")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="flush and exit after this long with nothing to read")
    _kafka_args(p)
    p.set_defaults(run=_run_sink)


def _run_sink(args: argparse.Namespace) -> int:
    from consumers import run_sink
    from eaglefeed.lifecycle import StopSignal

    cfg = SinkConfig(kafka=_kafka_config(args, "sink"), output=Path(args.output), group_id=args.group_id,
                     flush_rows=args.flush_rows, flush_bytes=args.flush_bytes,
                     flush_seconds=args.flush_seconds, exit_when_idle=args.exit_when_idle,
                     metrics_port=args.metrics_port)
    summary = run_sink(cfg, stop=StopSignal().install())
    print(f"sink: wrote {summary.rows_written} rows in {summary.segments} segments; dropped "
          f"{summary.duplicates_dropped} duplicates; dead-lettered {summary.dead_lettered}")
    return 0


# --- demo ---------------------------------------------------------------------------------

def _demo_parser(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "demo", "run the whole pipeline on the bundled sample prompts: local broker, "
                              "SGLang stand-in, producer, one worker, sink")
    p.add_argument("--output", type=Path, default=Path("demo-data"), help="dataset directory (replaced)")
    p.add_argument("--work-dir", type=Path, default=Path(".eaglefeed/demo"),
                   help="broker data and logs of the demo (replaced)")
    p.add_argument("--cache-dir", type=Path, default=_cache_dir(), help="Kafka jar cache")
    p.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from eaglefeed.demojob import run_demo

    return run_demo(output=args.output, work_dir=args.work_dir, cache_dir=args.cache_dir)


def _int_env(name: str, default: int | None = None) -> int | None:
    value = env_default(name, None)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        print(f"eaglefeed: EAGLEFEED_{name} must be an integer, got {value!r}", file=sys.stderr)
        raise SystemExit(2) from None


def _cache_dir() -> Path:
    return Path(env_default("CACHE_DIR", str(Path.home() / ".cache" / "eaglefeed")) or ".")
