"""``eaglefeed converse``: generations of conversation prompts → the next turns' prompts."""

from __future__ import annotations

import argparse

from eaglefeed.chat.toolcalls import TOOL_FORMAT_CHOICES
from eaglefeed.cli._common import (
    add_command,
    add_kafka_args,
    add_stall_arg,
    add_trust_remote_code,
    kafka_config,
    positive_int,
)
from eaglefeed.cli._parser import use_env
from eaglefeed.core.config import ConverseConfig

_C = ConverseConfig  # its field defaults are the flags' defaults


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "converse",
                    "continue regenerated conversations (produce --history rerender|tokens): publish each "
                    "turn's next prompt once its generation is durable, or record how the conversation ended")
    use_env(p.add_argument("--group-id", default=_C.group_id,
                           help="consumer group of the converse stage (default: <topic prefix>-converse)"),
            "CONVERSE_GROUP")
    p.add_argument("--tokenizer", default=_C.tokenizer,
                   help="render the next turns with this tokenizer (path or hub id) instead of the one "
                        "each prompt names; its files must be the same (checked by hash)")
    add_trust_remote_code(p, loads="to render the next turns")
    p.add_argument("--tool-format", choices=TOOL_FORMAT_CHOICES, default=_C.tool_format,
                   help="how tool calls are parsed out of regenerated turns; auto (default): the format "
                        "`eaglefeed produce` recorded, else what the tokenizer's added tokens and chat "
                        "template tell (logged; the stage stops on a tool conversation when it cannot tell)")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=_C.max_prompt_tokens,
                   help="a longer next prompt ends the conversation (truncated, prompt_too_long)")
    p.add_argument("--exit-when-idle", type=float, default=_C.exit_when_idle, metavar="SECONDS",
                   help="exit once caught up (every assigned partition read to its end) for this long; "
                        "input topics that do not appear within this long are an error")
    add_stall_arg(p)
    add_kafka_args(p)
    p.set_defaults(run=_run_converse)


def converse_config(args: argparse.Namespace) -> ConverseConfig:
    """The ConverseConfig that parsed ``converse`` flags describe."""
    return ConverseConfig(kafka=kafka_config(args, "converse"), group_id=args.group_id,
                          tokenizer=args.tokenizer, tool_format=args.tool_format,
                          trust_remote_code=args.trust_remote_code,
                          max_prompt_tokens=args.max_prompt_tokens,
                          exit_when_idle=args.exit_when_idle, stall_seconds=args.stall_seconds or None,
                          metrics_port=args.metrics_port)


def _run_converse(args: argparse.Namespace) -> int:
    from eaglefeed.consumers.converse import run_converse
    from eaglefeed.core.lifecycle import StopSignal

    summary = run_converse(converse_config(args), stop=StopSignal().install())
    print(summary.describe(), flush=True)
    return 0
