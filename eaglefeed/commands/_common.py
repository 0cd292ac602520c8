"""Flag helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eaglefeed.config import DEFAULT_BOOTSTRAP_SERVERS, DEFAULT_TOPIC_PREFIX, KafkaConfig, env_default


def add_command(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose help shows defaults."""
    return sub.add_parser(name, help=help_text, description=help_text,
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    """Flags every Kafka-using command shares (broker, topic prefix, metrics port)."""
    p.add_argument("--bootstrap-servers", default=env_default("BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP_SERVERS),
                   help="Kafka bootstrap servers, host:port[,host:port] (env EAGLEFEED_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic-prefix", default=env_default("TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX),
                   help="topics are <prefix>.prompts, <prefix>.generations, <prefix>.dead-letter "
                        "(env EAGLEFEED_TOPIC_PREFIX)")
    p.add_argument("--metrics-port", type=int, default=int_env("METRICS_PORT"),
                   help="serve Prometheus /metrics on 127.0.0.1:PORT (env EAGLEFEED_METRICS_PORT)")


def kafka_config(args: argparse.Namespace, role: str) -> KafkaConfig:
    """The KafkaConfig the common flags describe."""
    return KafkaConfig(bootstrap_servers=args.bootstrap_servers, topic_prefix=args.topic_prefix,
                       client_id=f"eaglefeed-{role}")


def int_env(name: str, default: int | None = None) -> int | None:
    """An integer from ``EAGLEFEED_<name>``, or ``default``."""
    value = env_default(name, None)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        print(f"eaglefeed: EAGLEFEED_{name} must be an integer, got {value!r}", file=sys.stderr)
        raise SystemExit(2) from None


def cache_dir() -> Path:
    """Where downloaded artifacts (the Kafka jars) are cached."""
    return Path(env_default("CACHE_DIR", str(Path.home() / ".cache" / "eaglefeed")) or ".")
