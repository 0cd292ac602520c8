"""Flag helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eaglefeed.config import (
    DEFAULT_BOOTSTRAP_SERVERS,
    DEFAULT_TOPIC_PREFIX,
    KafkaConfig,
    env_default,
    read_secret,
)

# flag destination → (environment name, help); all strings, None when unset
_SECURITY_FLAGS = {
    "security_protocol": ("SECURITY_PROTOCOL", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    "sasl_mechanism": ("SASL_MECHANISM", "SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"),
    "sasl_username": ("SASL_USERNAME", "SASL user"),
    "sasl_password": ("SASL_PASSWORD", "SASL password; '@FILE' reads it from a file (prefer that or "
                                       "the environment: a password on the command line shows in ps)"),
    "ssl_cafile": ("SSL_CAFILE", "PEM file of the CA that signed the broker's certificate "
                                 "(default: the system's CAs)"),
    "ssl_certfile": ("SSL_CERTFILE", "PEM client certificate, for brokers that require mutual TLS"),
    "ssl_keyfile": ("SSL_KEYFILE", "PEM private key of --ssl-certfile"),
}


def add_command(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose help shows defaults."""
    return sub.add_parser(name, help=help_text, description=help_text,
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    """Flags every Kafka-using command shares (broker, topic prefix, metrics port, SASL/TLS)."""
    p.add_argument("--bootstrap-servers", default=env_default("BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP_SERVERS),
                   help="Kafka bootstrap servers, host:port[,host:port] (env EAGLEFEED_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic-prefix", default=env_default("TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX),
                   help="topics are <prefix>.prompts, <prefix>.generations, <prefix>.dead-letter "
                        "(env EAGLEFEED_TOPIC_PREFIX)")
    p.add_argument("--metrics-port", type=int, default=int_env("METRICS_PORT"),
                   help="serve Prometheus /metrics on 127.0.0.1:PORT (env EAGLEFEED_METRICS_PORT)")
    add_security_args(p)


def add_security_args(p: argparse.ArgumentParser) -> None:
    """Kafka SASL/TLS flags, each also read from ``EAGLEFEED_<NAME>``."""
    group = p.add_argument_group("Kafka security (SASL/TLS)")
    # Defaults stay out of the namespace (and so out of --help): kafka_config reads the environment.
    for dest, (env, help_text) in _SECURITY_FLAGS.items():
        group.add_argument("--" + dest.replace("_", "-"), dest=dest, default=argparse.SUPPRESS,
                           help=f"{help_text} (env EAGLEFEED_{env})")
    group.add_argument("--ssl-check-hostname", action=argparse.BooleanOptionalAction,
                       default=argparse.SUPPRESS,
                       help="verify that the broker's certificate names the host connected to "
                            "(default; env EAGLEFEED_SSL_CHECK_HOSTNAME=true|false)")


def kafka_config(args: argparse.Namespace, role: str) -> KafkaConfig:
    """The KafkaConfig the common flags describe.

    Security settings a command has no flags for come from the environment alone.
    """
    security = {dest: getattr(args, dest, None) or env_default(env, None)
                for dest, (env, _help) in _SECURITY_FLAGS.items()}
    security["sasl_password"] = read_secret(security["sasl_password"])
    check_hostname = getattr(args, "ssl_check_hostname", None)
    return KafkaConfig(bootstrap_servers=args.bootstrap_servers, topic_prefix=args.topic_prefix,
                       client_id=f"eaglefeed-{role}",
                       security_protocol=security.pop("security_protocol") or "PLAINTEXT",
                       ssl_check_hostname=_check_hostname_env() if check_hostname is None else check_hostname,
                       **security)


def _check_hostname_env() -> bool:
    value = (env_default("SSL_CHECK_HOSTNAME", "true") or "true").strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        print(f"eaglefeed: EAGLEFEED_SSL_CHECK_HOSTNAME must be true or false, got {value!r}",
              file=sys.stderr)
        raise SystemExit(2)
    return value in ("1", "true", "yes", "on")


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
