"""The ``eaglefeed`` command: parse flags (and EAGLEFEED_* variables), build config, run a stage."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from eaglefeed import __version__
from eaglefeed.cli import (
    broker,
    compact,
    converse,
    dead_letters,
    demo,
    export,
    generate,
    local_servers,
    produce,
    sink,
    stats,
    status,
    vocab_map,
)
from eaglefeed.cli._config_file import ConfigFileError, add_config_flag, config_path, load_config
from eaglefeed.cli._env_names import bind_environment
from eaglefeed.cli._parser import EnvArgumentParser, EnvHelpFormatter
from eaglefeed.core.config import DEFAULT_LOG_LEVEL
from eaglefeed.core.errors import EaglefeedError, StopRequestedError

log = logging.getLogger("eaglefeed")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``eaglefeed`` console script; returns the exit code."""
    parser = build_parser()
    path = config_path(sys.argv[1:] if argv is None else argv)
    if path is not None:
        try:
            load_config(parser, path)
        except ConfigFileError as exc:
            parser.exit(2, f"eaglefeed: error: {exc}\n")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("kafka", "httpx"):  # per-connection and per-request INFO lines
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:  # `eaglefeed stats DIR | head`: stop quietly, as Unix tools do
        _drop_stdout()
        return 128 + signal.SIGPIPE
    except StopRequestedError as exc:
        log.warning("%s", exc)
        return 130
    except EaglefeedError as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that nothing is written to the closed pipe at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand; each option can also come from its variable.

    A command's own options read ``EAGLEFEED_<COMMAND>_<FLAG>``, the pipeline-wide ones
    ``EAGLEFEED_<FLAG>`` (``eaglefeed.cli._env_names``).
    """
    parser = EnvArgumentParser(
        prog="eaglefeed", formatter_class=EnvHelpFormatter,
        description="Token-exact training data for speculative-decoding draft models: "
                    "prompts → Kafka → SGLang /generate → Kafka → Parquet.")
    parser.add_argument("--version", action="version", version=f"eaglefeed {__version__}")
    parser.add_argument("--log-level", default=DEFAULT_LOG_LEVEL,
                        choices=["debug", "info", "warning", "error"], help="log verbosity")
    add_config_flag(parser, dest="config_file")
    sub = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for command in (broker, local_servers, produce, generate, converse, sink, compact, export, vocab_map,
                    stats, status, dead_letters, demo):
        command.register(sub)
    bind_environment(parser)
    return parser
