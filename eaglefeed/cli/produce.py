"""``eaglefeed produce``: prompt files → PromptRecords on Kafka."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path

from eaglefeed.chat.toolcalls import TOOL_FORMAT_CHOICES
from eaglefeed.cli._common import (
    add_command,
    add_kafka_args,
    add_trust_remote_code,
    kafka_config,
    positive_int,
)
from eaglefeed.cli._parser import use_env
from eaglefeed.core.config import (
    HISTORY_CHOICES,
    TURNS,
    ProducerConfig,
    PromptSettings,
    SamplingDefaults,
    env_default,
    producer_state_dir,
    tokenizer_reference,
)
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.mixes import SamplingMix, parse_temperature_cycle, parse_template_kwargs_cycle

_P = ProducerConfig  # its field defaults are the flags' defaults
_R = PromptSettings  # ... these of the prompt flags
_S = SamplingDefaults  # ... and these of the sampling flags (neutral: without a generation_config.json)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "produce", "render, tokenize and publish prompts from JSONL, JSON-array and "
                                    "Parquet files, folders of them, or stdin (-)")
    p.add_argument("inputs", nargs="+",
                   help="files (.jsonl, .json, .parquet), folders of them, or - for stdin")
    p.add_argument("--tokenizer",
                   help="required: the target model's tokenizer (path or hub id) whose chat template "
                        "renders the prompts")
    add_trust_remote_code(p, loads="to render the prompts (render processes included)")
    p.add_argument("--model", default=_R.model,
                   help="the model the prompts are for, recorded in each (a worker refuses a server of "
                        "another, compared by the last path component: /models/Qwen3-8B is Qwen/Qwen3-8B); "
                        "default: the --tokenizer hub id, or its directory when a config.json lies there "
                        "(a model's), else unknown; '' records none (any server is taken)")
    p.add_argument("--turns", choices=TURNS, default=_R.turns,
                   help="last: the conversation up to its last user turn; all: one prompt per assistant turn")
    p.add_argument("--history", choices=HISTORY_CHOICES, default=_R.history,
                   help="original: the dataset's own assistant turns are the history (--turns); "
                        "rerender or tokens: regenerate whole conversations, each turn from the "
                        "model's own earlier turns (needs `eaglefeed converse` running; "
                        "docs/CONVERSATIONS.md)")
    p.add_argument("--max-turns", type=positive_int, default=_R.max_turns,
                   help="--history rerender/tokens: assistant turns generated per conversation at most")
    p.add_argument("--tool-format", choices=TOOL_FORMAT_CHOICES, default=_R.tool_format,
                   help="--history rerender/tokens: how `eaglefeed converse` reads the turns' tool calls; "
                        "auto (default): from the tokenizer's added tokens and chat template (logged; a "
                        "run with tools stops when it cannot tell)")
    p.add_argument("--samples", type=positive_int, default=_R.samples, help="generations wanted per prompt")
    _add_sampling_args(p)
    p.add_argument("--chat-template-kwargs", default="{}",
                   help='JSON object passed to the chat template, e.g. \'{"enable_thinking": false}\' '
                        "(a file's <name>.overrides.json and each row may override it)")
    p.add_argument("--template-kwargs-cycle", default=None, metavar="CYCLE",
                   help="a mix of template kwargs, one drawn per row from its messages and tools (a rerun "
                        "draws the same; merged over --chat-template-kwargs): KEY=VALUE[:WEIGHT],... such "
                        "as reasoning_effort=low:4,medium:4,high:2, or a JSON list of objects, each "
                        "optionally [object, WEIGHT]")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=_R.max_prompt_tokens,
                   help="longer prompts go to the dead-letter topic")
    p.add_argument("--keep-duplicates", action="store_true", default=_R.keep_duplicates,
                   help="keep identical prompts of rows with distinct ids: the row's id (its line "
                        "number when it has none) joins the prompt id (by default identical "
                        "prompts are merged into one, whatever their ids, and counted as duplicate)")
    p.add_argument("--skip-done", type=Path, default=_R.skip_done, metavar="DATASET_DIR",
                   help="skip prompts that already have --samples rows in this sink dataset")
    p.add_argument("--follow", action="store_true", default=_P.follow,
                   help="keep watching the inputs for appended lines and new files until interrupted")
    use_env(p.add_argument("--state-dir", default=str(producer_state_dir()),
                           help="where the progress ledger lives (default %(default)s: produce/ in "
                                "the cache dir): the same command again, from any directory (same "
                                "inputs and prompt settings), resumes after the rows Kafka "
                                "acknowledged of each input that still starts with the rows read"),
            "PRODUCER_STATE_DIR")
    p.add_argument("--restart", action="store_true", default=_P.restart,
                   help="forget the progress ledger and publish every input again")
    p.add_argument("--allow-mixed", action="store_true",
                   help="publish although the prompts topic holds prompts of another tokenizer, chat "
                        "template or model (refused by default, naming both: one prefix makes one dataset)")
    p.add_argument("--poll-interval", type=float, default=_P.poll_interval,
                   help="--follow: seconds between scans")
    p.add_argument("--workers", default="auto",
                   help="render processes: a number (0 renders in the producer process) or auto "
                        "(one per core for inputs over 4 MB or with --follow, else 0)")
    p.add_argument("--batch-size", type=positive_int, default=_P.batch_size,
                   help="rows rendered and tokenized together")
    p.add_argument("--partitions", type=positive_int, default=_P.partitions,
                   help="partitions of topics created here")
    p.add_argument("--strict", action="store_true", default=_P.strict, help="exit 2 if any line was bad")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="draw a progress bar on stderr (default: when stderr is a terminal)")
    add_kafka_args(p)
    p.set_defaults(run=_run_produce)


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    """The sampling parameters stamped on every prompt (a file's sidecar or a row may override them)."""
    p.add_argument("--max-new-tokens", type=int, default=_S.max_new_tokens,
                   help="most tokens generated per sample")
    # None: the model's generation_config.json says, else the neutral SamplingDefaults (_sampling)
    p.add_argument("--temperature", type=float, default=None,
                   help=f"sampling temperature{_from_model(_S.temperature)}")
    p.add_argument("--top-p", type=float, default=None,
                   help=f"nucleus sampling: the top tokens whose probabilities add up to P"
                        f"{_from_model(_S.top_p)}")
    p.add_argument("--top-k", type=int, default=None,
                   help=f"the K most likely tokens; -1 means all tokens{_from_model(_S.top_k)}")
    p.add_argument("--min-p", type=float, default=None,
                   help=f"drop tokens less likely than P times the most likely one{_from_model(_S.min_p)}")
    p.add_argument("--temperature-cycle", default=None, metavar="T[:W],...",
                   help="a mix of temperatures instead of one --temperature, one drawn per row from its "
                        "messages and tools (a rerun draws the same), e.g. 0,0.6,1.0 or 0:2,1.0:1 "
                        "(weights: shares)")
    p.add_argument("--seed", type=int, default=_S.seed, help="base seed; sample i uses seed+i")
    p.add_argument("--stop-token-ids", default=",".join(map(str, _S.stop_token_ids)),
                   help="comma-separated extra stop token ids")


def _from_model(neutral: object) -> str:
    return f" (default: the model's generation_config.json beside the tokenizer, else {neutral})"


def producer_config(args: argparse.Namespace) -> ProducerConfig:
    """The ProducerConfig that parsed ``produce`` flags describe.

    Raises:
        SystemExit: with one line, when ``--tokenizer`` is missing or a flag's text is malformed.
    """
    if not args.tokenizer:
        print("eaglefeed produce: error: --tokenizer is required (or EAGLEFEED_PRODUCE_TOKENIZER): the "
              "target model's tokenizer, a path or hub id such as Qwen/Qwen3-8B", file=sys.stderr)
        raise SystemExit(2)
    try:
        kwargs = json.loads(args.chat_template_kwargs)
        stops = tuple(int(t) for t in args.stop_token_ids.split(",") if t.strip())
    except ValueError as exc:
        raise SystemExit(f"eaglefeed produce: bad --chat-template-kwargs or --stop-token-ids: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise SystemExit("eaglefeed produce: --chat-template-kwargs must be a JSON object")
    if args.follow and "-" in args.inputs:
        raise SystemExit("eaglefeed produce: --follow watches files and folders, not stdin")
    mix = _mix(args)
    sampling, note = _sampling(args, stops, mix)
    if mix.active:  # logged when the run starts, beside the sampling defaults
        note = "; ".join(filter(None, [note, mix.describe()]))
    prompts = PromptSettings(
        tokenizer=args.tokenizer, samples=args.samples, chat_template_kwargs=kwargs,
        max_prompt_tokens=args.max_prompt_tokens,
        sampling=sampling,
        turns=args.turns, history=args.history, max_turns=args.max_turns, skip_done=args.skip_done,
        trust_remote_code=args.trust_remote_code, keep_duplicates=args.keep_duplicates,
        tool_format=args.tool_format, mix=mix, model=args.model)
    return ProducerConfig(
        kafka=kafka_config(args, "producer"), inputs=tuple(args.inputs), prompts=prompts,
        partitions=args.partitions, strict=args.strict, metrics_port=args.metrics_port,
        follow=args.follow, state_dir=Path(args.state_dir) if args.state_dir else None,
        restart=args.restart, allow_mixed=args.allow_mixed, poll_interval=args.poll_interval,
        workers=_workers(args),
        batch_size=args.batch_size, sampling_note=note,
        progress=sys.stderr.isatty() if args.progress is None else args.progress)


def _mix(args: argparse.Namespace) -> SamplingMix:
    """``--temperature-cycle`` and ``--template-kwargs-cycle``.

    Raises:
        SystemExit: with one line naming the flag, for a cycle that does not parse, or a
            temperature cycle given with ``--temperature``.
    """
    if args.temperature_cycle is not None and args.temperature is not None:
        raise SystemExit("eaglefeed produce: --temperature and --temperature-cycle exclude each other: "
                         "give one temperature or a cycle of them")
    try:
        temperatures, kwargs = args.temperature_cycle, args.template_kwargs_cycle
        return SamplingMix(temperatures=() if temperatures is None else parse_temperature_cycle(temperatures),
                           template_kwargs=() if kwargs is None else parse_template_kwargs_cycle(kwargs))
    except ConfigError as exc:
        raise SystemExit(f"eaglefeed produce: {exc}") from None


def _sampling(args: argparse.Namespace, stops: tuple[int, ...],
              mix: SamplingMix) -> tuple[SamplingDefaults, str]:
    """The sampling flags; those not given come from the model's generation_config.json, else neutral.

    Returns:
        the sampling defaults and a line saying where those not given came from ("" if all were).

    Raises:
        ConfigError: the model's generation_config.json is unreadable or out of range.
    """
    from eaglefeed.chat.sampling import MODEL_SAMPLING_KEYS, model_sampling

    given = {k: getattr(args, k) for k in MODEL_SAMPLING_KEYS if getattr(args, k) is not None}
    if mix.temperatures:  # each row's temperature comes from the cycle, never the model's file
        given["temperature"] = mix.temperatures[0][0]
    tokenizer = tokenizer_reference(args.tokenizer)  # a local directory as an absolute path, as in records
    model = model_sampling(tokenizer, given=given)
    sampling = SamplingDefaults(**{**model.values, **given}, max_new_tokens=args.max_new_tokens,
                                seed=args.seed, stop_token_ids=stops)
    chosen = ", ".join(f"{k}={getattr(sampling, k)}" for k in MODEL_SAMPLING_KEYS if k not in given)
    # recorded with every prompt anyway; run_producer logs it so that a surprise is seen at once
    note = (f"sampling defaults {model.describe(tokenizer)}: {chosen} (a flag, an overrides file "
            "or a row's sampling_params overrides them)") if chosen else ""
    return sampling, note


def _run_produce(args: argparse.Namespace) -> int:
    from eaglefeed.core.lifecycle import StopSignal
    from eaglefeed.producers import run_producer

    stop = StopSignal().install()
    cfg = producer_config(args)
    check = _converse_check(cfg) if cfg.prompts.history != "original" else None
    summary = run_producer(cfg, stop=stop)
    if check is not None:
        check.join(timeout=CONVERSE_CHECK_SECONDS)  # its warning before the summary, however quick the run
    print(summary.describe())
    merged = summary.skipped_by_reason.get("duplicate", 0)
    if merged and not cfg.prompts.keep_duplicates:
        print(f"produce: {merged} prompts were identical to one published before in this run (same "
              "messages, tools and settings) and were merged into it; --keep-duplicates keeps one per "
              "row id", file=sys.stderr)
    if stop.is_set() and not args.follow:  # interrupted before every input was read: as Ctrl-C elsewhere
        return 130
    return 2 if args.strict and summary.dead_lettered else 0


CONVERSE_CHECK_SECONDS = 10.0
"""How long the check for a converse member may take (it runs beside the producer)."""


def _converse_check(cfg: ProducerConfig) -> threading.Thread:
    """Beside the run: warn when a conversation mode has no ``eaglefeed converse`` member to continue it."""
    thread = threading.Thread(target=_warn_without_converse, args=(cfg,), name="converse-check", daemon=True)
    thread.start()
    return thread


def _warn_without_converse(cfg: ProducerConfig) -> None:
    from dataclasses import replace

    from kafka.errors import KafkaError

    from eaglefeed.core.errors import EaglefeedError
    from eaglefeed.core.lag import LagProbe

    group = env_default("CONVERSE_GROUP_ID", None) or cfg.kafka.default_group("converse")
    try:  # a few seconds at most: an unreachable broker is the producer's own one line
        probe = LagProbe(kafka=replace(cfg.kafka, connect_timeout=min(5.0, cfg.kafka.connect_timeout)),
                         retry_seconds=2.0)
        try:
            members = probe.members(group)
        finally:
            probe.close()
    except (KafkaError, EaglefeedError, OSError):
        return
    if members == 0:
        logging.getLogger("eaglefeed.produce").warning(
            "--history %s: no `eaglefeed converse` is running in group %s: conversations stop after their "
            "first turn until one is started (docs/CONVERSATIONS.md)", cfg.prompts.history, group)


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
