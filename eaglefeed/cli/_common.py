"""Flag helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eaglefeed.cli._config_file import add_config_flag
from eaglefeed.cli._parser import EnvHelpFormatter
from eaglefeed.core.config import (
    DEFAULT_INTERACTIVE_CONNECT_TIMEOUT,
    STALL_SECONDS,
    KafkaConfig,
    env_default,
    parse_bool,
    read_secret,
)

_K = KafkaConfig  # its field defaults are the flags' defaults
Flags = argparse._ActionsContainer
"""Where a helper adds its flags: a command's parser, or one of its argument groups (``--help`` sections)."""

# flag destination → help; each is a string, None when unset
_SECURITY_FLAGS = {
    "security_protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: PLAINTEXT)",
    "sasl_mechanism": "SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN",
    "sasl_username": "SASL user",
    "sasl_password": "SASL password; '@FILE' reads it from a file (prefer that or the environment: "
                     "a password on the command line shows in ps)",
    "ssl_cafile": "PEM file of the CA that signed the broker's certificate (default: the system's CAs)",
    "ssl_certfile": "PEM client certificate, for brokers that require mutual TLS",
    "ssl_keyfile": "PEM private key of --ssl-certfile",
}


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (0 or less is a configuration mistake)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def dataset_location(text: str) -> str | Path:
    """An argparse type: a dataset directory, or ``s3://bucket/prefix`` (kept as the string)."""
    if text.startswith("s3://"):
        bucket = text[5:].partition("/")[0]
        if len(bucket) < 3:
            raise argparse.ArgumentTypeError(f"{text}: name a bucket, as in s3://bucket/prefix")
        return text
    return Path(text)


def add_dataset_arg(p: argparse.ArgumentParser) -> None:
    """The positional ``dataset``: a directory or an object-store URI (see :func:`dataset_dir`)."""
    p.add_argument("dataset", type=dataset_location,
                   help="the dataset: a directory (the sink's --output) or s3://bucket/prefix")


def dataset_dir(where: str | Path) -> Path:
    """The directory to work on for ``where``: itself, or an ``s3://`` dataset's mirror, brought up to date.

    The store's endpoint and credentials come from the usual AWS variables (docs/DATASET.md).
    """
    if isinstance(where, Path):
        return where
    from eaglefeed.dataset.store import open_dataset

    return open_dataset(where)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
                help_text: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose help shows each option's default and environment variable.

    Every command takes ``--config FILE`` (read before parsing: ``eaglefeed.cli._config_file``).
    """
    p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=EnvHelpFormatter)
    add_config_flag(p)
    return p


def add_trust_remote_code(p: Flags, *, loads: str) -> None:
    """``--trust-remote-code``: let a tokenizer run its own Python code (off: refused in one line).

    Args:
        p: the command's parser, or one of its groups.
        loads: what the command loads a tokenizer for, for the help text.
    """
    p.add_argument("--trust-remote-code", action="store_true", default=False,
                   help=f"run the Python code a tokenizer ships (its tokenizer_config.json auto_map, "
                        f"e.g. Kimi-K2's tiktoken tokenizer) when loading it {loads}; without it such a "
                        f"tokenizer stops the command with one line; only for tokenizers you trust")


def add_connection_args(p: Flags, *, interactive: bool = False) -> None:
    """Where the broker is and how the topics are named.

    Args:
        p: the command's parser, or one of its groups.
        interactive: a command a person runs and waits for (``status``, ``dead-letters``): it
            gives up on an unreachable broker after a few seconds, not a stage's minute.
    """
    p.add_argument("--bootstrap-servers", default=_K.bootstrap_servers,
                   help="Kafka bootstrap servers, host:port[,host:port]")
    p.add_argument("--topic-prefix", default=_K.topic_prefix,
                   help="topics are <prefix>.prompts, <prefix>.generations, <prefix>.dead-letter")
    if interactive:
        p.add_argument("--connect-timeout", type=float, default=DEFAULT_INTERACTIVE_CONNECT_TIMEOUT,
                       metavar="SECONDS", help="try to reach the broker this long, then stop with one line")
        return
    p.add_argument("--connect-timeout", type=float, default=_K.connect_timeout, metavar="SECONDS",
                   help="keep trying to reach the broker this long at start, then stop with one line "
                        "(long enough to ride out a broker restart)")


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    """Flags every Kafka-using stage shares (broker, topic prefix, metrics port, SASL/TLS)."""
    add_connection_args(p)
    add_metrics_arg(p)
    add_security_args(p)


def add_metrics_arg(p: Flags) -> None:
    """``--metrics-port``, where a stage serves its Prometheus metrics."""
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus /metrics on PORT (on 127.0.0.1 unless EAGLEFEED_METRICS_HOST "
                        "says otherwise)")


def add_stall_arg(p: Flags) -> None:
    """``--stall-seconds``, the watchdog every consuming stage runs (``eaglefeed.core.watchdog``)."""
    p.add_argument("--stall-seconds", type=float, default=STALL_SECONDS, metavar="SECONDS",
                   help="a partition with records that returns none for this long: "
                        "seek it, then join the group again, then exit non-zero for a supervisor, one "
                        "step per SECONDS (0: no watchdog)")


def add_security_args(p: argparse.ArgumentParser) -> None:
    """Kafka SASL/TLS flags, in a ``--help`` section of their own."""
    group = p.add_argument_group("Kafka security (SASL/TLS)")
    # Unset flags stay out of the namespace: kafka_config falls back to the environment, so that
    # commands without these flags (status) honour the same variables.
    for dest, help_text in _SECURITY_FLAGS.items():
        group.add_argument("--" + dest.replace("_", "-"), dest=dest, default=argparse.SUPPRESS,
                           help=help_text)
    group.add_argument("--ssl-check-hostname", action=argparse.BooleanOptionalAction,
                       default=argparse.SUPPRESS,
                       help="verify that the broker's certificate names the host connected to (default: on)")


def kafka_config(args: argparse.Namespace, role: str) -> KafkaConfig:
    """The KafkaConfig the common flags describe.

    Security settings a command has no flags for come from the environment alone.
    """
    security = {dest: getattr(args, dest, None) or env_default(dest.upper(), None)
                for dest in _SECURITY_FLAGS}
    security["sasl_password"] = read_secret(security["sasl_password"])
    check_hostname = getattr(args, "ssl_check_hostname", None)
    return KafkaConfig(bootstrap_servers=args.bootstrap_servers, topic_prefix=args.topic_prefix,
                       client_id=f"eaglefeed-{role}", connect_timeout=args.connect_timeout,
                       security_protocol=security.pop("security_protocol") or _K.security_protocol,
                       ssl_check_hostname=_check_hostname_env() if check_hostname is None else check_hostname,
                       **security)


def _check_hostname_env() -> bool:
    value = env_default("SSL_CHECK_HOSTNAME", None)
    if value is None:
        return _K.ssl_check_hostname
    try:
        return parse_bool(value)
    except ValueError:
        print(f"eaglefeed: EAGLEFEED_SSL_CHECK_HOSTNAME must be true or false, got {value!r}",
              file=sys.stderr)
        raise SystemExit(2) from None


def add_allow_mixed(p: argparse.ArgumentParser) -> None:
    """``--allow-mixed``: read (or publish into) data of more than one tokenizer, chat template or model."""
    p.add_argument("--allow-mixed", action="store_true",
                   help="go on although the rows were made with more than one tokenizer, chat template or "
                        "model (refused by default, naming each and its row count)")
